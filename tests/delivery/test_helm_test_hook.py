"""The chart's ``helm test``: per profile the chart creates, ``kubectl wcow verify`` runs a pod of
its RuntimeClass on a ready node (tests/plugin/test_verify.py judges the pods); here, what Helm
renders: test hooks only, the RBAC of ``rbac.VERIFY_*`` exactly, arguments the plugin accepts.
On a real API server: tests/e2e/test_kubectl_wcow.py (no kubelets there: the check pod is
created, never started, and deleted)."""

from __future__ import annotations

from typing import Any

from tests.delivery.helpers import find, lint, render
from wcow_operator import rbac
from wcow_operator.plugin.cli import _parser

WITH_PROFILES = {
    "crds": {"enabled": False},
    "profiles": {"create": True, "hyperv": {"builds": ["ltsc2022", "10.0.17763"]}},
}


def hook_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        o
        for o in render(values if values is not None else WITH_PROFILES)
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == "test"
    ]


def test_one_check_per_profile_the_chart_creates() -> None:
    pod = find(hook_objects(), "Pod")
    (container,) = pod["spec"]["containers"]
    args = _parser().parse_args(container["args"])
    assert container["command"] == ["kubectl-wcow"]
    assert args.command == "verify"
    assert args.profile == ["wcow-process", "hyperv-ltsc2022", "hyperv-10-0-17763"]
    profiles = {
        o["metadata"]["name"] for o in render(WITH_PROFILES) if o["kind"] == "WindowsRuntimeProfile"
    }
    assert set(args.profile) == profiles
    assert args.namespace == "wcow-system"
    assert args.image == "registry.k8s.io/pause:3.10"
    assert args.timeout_seconds == 300
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_everything_is_a_test_hook_cleaned_up_after_success() -> None:
    objects = hook_objects()
    assert sorted(o["kind"] for o in objects) == [
        "ClusterRole", "ClusterRoleBinding", "Pod", "Role", "RoleBinding", "ServiceAccount",
    ]  # fmt: skip
    for obj in objects:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in objects}
    assert max(w for k, w in weights.items() if k != "Pod") < weights["Pod"]  # RBAC first


def test_the_test_may_do_exactly_what_verify_does() -> None:
    objects = hook_objects()
    assert find(objects, "ClusterRole")["rules"] == rbac.VERIFY_CLUSTER_RULES
    assert find(objects, "Role")["rules"] == rbac.VERIFY_NAMESPACE_RULES
    account = find(objects, "ServiceAccount")["metadata"]["name"]
    assert find(objects, "Pod")["spec"]["serviceAccountName"] == account
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert find(objects, kind)["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "wcow-system"}
        ]


def test_no_profiles_or_tests_disabled_render_no_test() -> None:
    assert hook_objects({}) == []  # profiles.create is off by default
    assert hook_objects({**WITH_PROFILES, "tests": {"enabled": False}}) == []


def test_values_are_checked_and_the_chart_lints() -> None:
    assert lint(WITH_PROFILES) == []
    assert lint({**WITH_PROFILES, "tests": {"timeoutSeconds": 2}}) != []
    custom = {**WITH_PROFILES, "tests": {"image": "corp.example/pause:1", "timeoutSeconds": 60}}
    args = _parser().parse_args(find(hook_objects(custom), "Pod")["spec"]["containers"][0]["args"])
    assert (args.image, args.timeout_seconds) == ("corp.example/pause:1", 60)
