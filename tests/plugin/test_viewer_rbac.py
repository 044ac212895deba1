"""RBAC as code for ``kubectl wcow``: every read it makes is granted by the viewer rules, and
the viewer rules grant nothing else: no write, no Secret."""

from __future__ import annotations

import inspect

from wcow_operator import rbac
from wcow_operator.k8s.reader import VIEWER_PERMISSIONS, ClusterReader

READS = {"get", "list"}


def test_every_reader_method_declares_its_permission() -> None:
    public = {n for n, _ in inspect.getmembers(ClusterReader, inspect.isfunction)}
    assert {n for n in public if not n.startswith("_")} == set(VIEWER_PERMISSIONS)


def test_every_declared_read_is_granted_to_the_viewer() -> None:
    for method, permissions in VIEWER_PERMISSIONS.items():
        for group, resource, verb, scope, name in permissions:
            rules = rbac.VIEWER_CLUSTER_RULES + (
                rbac.VIEWER_NAMESPACE_RULES if scope == "namespace" else []
            )
            assert rbac.allows(rules, group, resource, verb, name), (method, resource, verb)


def test_viewer_rules_only_read_and_never_secrets() -> None:
    for rule in rbac.VIEWER_CLUSTER_RULES + rbac.VIEWER_NAMESPACE_RULES:
        assert set(rule["verbs"]) <= READS, rule
        assert "secrets" not in rule["resources"]
        assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]
    assert not rbac.allows(rbac.VIEWER_NAMESPACE_RULES, "", "configmaps", "get", "other")


def test_every_check_pod_call_is_granted_to_the_helm_test() -> None:
    from wcow_operator.k8s.prober import VERIFY_PERMISSIONS

    reads = {m for m, ps in VIEWER_PERMISSIONS.items() if m in ("profiles", "windows_nodes")}
    assert reads == {"profiles", "windows_nodes"}
    for method in reads:
        for group, resource, verb, _, name in VIEWER_PERMISSIONS[method]:
            assert rbac.allows(rbac.VERIFY_CLUSTER_RULES, group, resource, verb, name), method
    for method, permissions in VERIFY_PERMISSIONS.items():
        for group, resource, verb, _, name in permissions:
            assert rbac.allows(rbac.VERIFY_NAMESPACE_RULES, group, resource, verb, name), method
    assert set(VERIFY_PERMISSIONS) == {"create_pod", "read_pod", "delete_pod"}
