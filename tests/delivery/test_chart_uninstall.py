"""The uninstall hook as the chart renders it: `helm uninstall` only, never
`helm upgrade`; the operator's image and ServiceAccount; RBAC that adds only the deletion of
profiles, and only while the hook runs; the same objects for the kustomize base, without the
hook annotations, outside the base's own resources."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from deploy.generate import DEPLOY, NAMESPACE, RELEASE, UNINSTALL

from tests.delivery.helpers import find, render
from wcow_contract.v1alpha1 import GROUP, PLURAL
from wcow_operator import rbac
from wcow_operator.k8s.uninstall_api import UNINSTALL_PERMISSIONS, UninstallApi

JOB = f"{RELEASE}-uninstall"
HOOK_KEYS = ("helm.sh/hook", "helm.sh/hook-weight", "helm.sh/hook-delete-policy")


def hooks(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        o
        for o in render(values)
        if "helm.sh/hook" in (o["metadata"].get("annotations") or {})
        and o["metadata"]["name"].endswith("-uninstall")
    ]


def test_the_hook_runs_on_uninstall_only_rbac_first() -> None:
    found = hooks()
    assert sorted(o["kind"] for o in found) == ["ClusterRole", "ClusterRoleBinding", "Job"]
    weights = {}
    for obj in found:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete", "never on install or upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[obj["kind"]] = int(annotations["helm.sh/hook-weight"])
    assert weights["ClusterRole"] < weights["ClusterRoleBinding"] < weights["Job"]


def test_the_job_runs_the_command_as_the_operator_bounded() -> None:
    job = find(render({"uninstall": {"timeoutSeconds": 600}}), "Job", JOB)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{RELEASE}-operator"
    (container,) = pod["containers"]
    operator = find(render(), "Deployment", f"{RELEASE}-operator")
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["args"] == ["uninstall", f"--namespace={NAMESPACE}", "--timeout=600"]
    assert job["spec"]["backoffLimit"] == 0, "a second run would only wait again"
    assert job["spec"]["activeDeadlineSeconds"] > 600
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"]["kubernetes.io/os"] == "linux"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "uninstall", "not the operator's pods"


def test_the_hook_adds_only_the_deletion_of_profiles_to_the_operator() -> None:
    role = find(render(), "ClusterRole", JOB)
    assert role["rules"] == copy.deepcopy(rbac.UNINSTALL_CLUSTER_RULES)
    assert role["rules"] == [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["delete"]}]
    binding = find(render(), "ClusterRoleBinding", JOB)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NAMESPACE}
    ]


def test_every_call_of_the_command_is_granted() -> None:
    public = {n for n in vars(UninstallApi) if not n.startswith("_")}
    assert public <= set(UNINSTALL_PERMISSIONS)
    rules = rbac.OPERATOR_CLUSTER_RULES + rbac.UNINSTALL_CLUSTER_RULES
    for method, permissions in UNINSTALL_PERMISSIONS.items():
        for group, resource, verb, scope, name in permissions:
            granted = rules + (rbac.OPERATOR_NAMESPACE_RULES if scope == "namespace" else [])
            assert rbac.allows(granted, group, resource, verb, name), (method, verb, resource)
    assert not rbac.allows(rbac.OPERATOR_CLUSTER_RULES, GROUP, PLURAL, "delete"), (
        "the running operator itself never deletes profiles"
    )


def test_disabled_renders_no_hook() -> None:
    assert hooks({"uninstall": {"enabled": False}}) == []


def test_the_kustomize_base_has_the_hook_apart_and_plain() -> None:
    base = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text(encoding="utf-8"))
    assert not any("uninstall" in r for r in base["resources"]), "kubectl apply -k deploy/ "
    listed = yaml.safe_load((UNINSTALL / "kustomization.yaml").read_text(encoding="utf-8"))
    assert listed["resources"] == [
        "uninstall-clusterrole.yaml",
        "uninstall-clusterrolebinding.yaml",
        "uninstall-job.yaml",
    ]
    for name in listed["resources"]:
        document = yaml.safe_load((UNINSTALL / name).read_text(encoding="utf-8"))
        annotations = document["metadata"].get("annotations") or {}
        assert not set(HOOK_KEYS) & set(annotations), name
