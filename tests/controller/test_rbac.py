"""RBAC as code: every API call the operator makes is granted by the generated rules."""

from __future__ import annotations

import inspect

from wcow_operator import rbac
from wcow_operator.controller.cluster_api import ClusterApi
from wcow_operator.k8s.kubernetes_api import PERMISSIONS, KubernetesApi


def public_methods(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


def test_every_adapter_method_declares_its_permission() -> None:
    assert public_methods(KubernetesApi) == set(PERMISSIONS)


def test_adapter_implements_the_whole_boundary() -> None:
    assert public_methods(ClusterApi) <= public_methods(KubernetesApi)


def test_every_declared_permission_is_granted() -> None:
    for method, permissions in PERMISSIONS.items():
        for group, resource, verb, scope, name in permissions:
            cluster = rbac.OPERATOR_CLUSTER_RULES + rbac.OPERATOR_EVICT_RULES
            rules = cluster if scope == "cluster" else cluster + rbac.OPERATOR_NAMESPACE_RULES
            assert rbac.allows(rules, group, resource, verb, name), (
                f"KubernetesApi.{method} uses {verb} {group or 'core'}/{resource}, "
                "which the operator's RBAC rules do not grant"
            )


def test_kopf_watches_are_granted() -> None:
    # kopf watches the CRDs to find the resources it serves.
    for group, resource in (("apiextensions.k8s.io", "customresourcedefinitions"),):
        for verb in ("list", "watch"):
            assert rbac.allows(rbac.OPERATOR_CLUSTER_RULES, group, resource, verb)


def test_leader_election_lease_is_granted_by_name() -> None:
    # kubernetes.leaderelection's LeaseLock reads, creates and replaces its Lease.
    rules = rbac.OPERATOR_NAMESPACE_RULES
    for verb in ("get", "update"):
        assert rbac.allows(rules, "coordination.k8s.io", "leases", verb, rbac.OPERATOR_LEASE)
        assert not rbac.allows(rules, "coordination.k8s.io", "leases", verb, "someone-else")
    assert rbac.allows(rules, "coordination.k8s.io", "leases", "create")
    assert not rbac.allows(rules, "", "configmaps", "update", "kube-root-ca.crt")


def test_the_operator_cannot_touch_secrets_or_pods() -> None:
    every = rbac.OPERATOR_CLUSTER_RULES + rbac.OPERATOR_NAMESPACE_RULES
    for resource in ("secrets", "pods", "pods/eviction", "serviceaccounts", "clusterroles"):
        for verb in ("get", "list", "create", "patch", "delete"):
            assert not rbac.allows(every, "", resource, verb)
    # Only where Evict is allowed: pods are listed and evicted (policy/v1, honouring
    # PodDisruptionBudgets), never deleted, changed or created. Nodes are patched only to
    # cordon (an admission policy holds the patch to spec.unschedulable and the annotation).
    evict = rbac.OPERATOR_EVICT_RULES
    assert rbac.allows(evict, "", "pods", "list")
    assert rbac.allows(evict, "", "pods/eviction", "create")
    for verb in ("get", "create", "patch", "update", "delete"):
        assert not rbac.allows(evict, "", "pods", verb)
    assert rbac.allows(every, "", "nodes", "patch")
    for verb in ("create", "update", "delete"):
        assert not rbac.allows(every, "", "nodes", verb)
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in every)
