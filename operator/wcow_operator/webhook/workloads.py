"""The pods a manifest will make, for ``wcow admit``: pure.

The webhook judges Pods only: a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or
CronJob passes the API server as written, and each pod its controller makes from the pod
template is admitted (and sized) when it is created. So a workload's template is never
changed, in the cluster or by ``wcow admit``; offline, each template is judged as the pod it
will become, and the output names the workload it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from wcow_contract.text import shown

# Where each kind keeps its pod template (apps/v1 and batch/v1, as the API server serves
# them; the kind decides, so a manifest of an older group version is read the same way).
TEMPLATE_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
KINDS: Final = ("Pod", *TEMPLATE_PATHS)


@dataclass(frozen=True)
class PodSource:
    """One pod to judge: ``what`` names it for the output ("pod 'web'", "Deployment 'web'
    (pod template)"); ``pod`` is None where ``problem`` says why the template is unreadable."""

    what: str
    pod: dict[str, Any] | None
    problem: str | None = None
    workload: bool = False


def _name(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return shown(name) if name is not None else "(no name)"


def _template_pod(document: Mapping[str, Any], kind: str) -> tuple[dict[str, Any] | None, str]:
    """The pod a workload's template becomes, or None and what is wrong with it."""
    node: Any = document
    where = ""
    for key in TEMPLATE_PATHS[kind]:
        where = f"{where}.{key}" if where else key
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            found = "absent" if node is None else f"{shown(node)}, not an object"
            return None, f"{where} is {found}"
    metadata = node.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return None, f"{where}.metadata is {shown(metadata)}, not an object"
    pod_metadata = dict(metadata or {})
    owner = document.get("metadata")
    namespace = owner.get("namespace") if isinstance(owner, dict) else None
    if namespace is not None and "namespace" not in pod_metadata:
        pod_metadata["namespace"] = namespace  # the pods are made in the workload's namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": node.get("spec")}
    return pod, ""


def _one(document: Mapping[str, Any], kind: str, prefix: str) -> PodSource:
    if kind == "Pod":
        return PodSource(f"{prefix}pod {_name(document)}", dict(document))
    what = f"{prefix}{kind} {_name(document)} (pod template)"
    pod, problem = _template_pod(document, kind)
    return PodSource(what, pod, problem or None, workload=True)


def pods_in(document: Any) -> list[PodSource]:
    """The pods a YAML document will make: a Pod, a workload's template, or those of each
    item of a List (``kubectl get -o yaml``; the items of a typed list such as
    DeploymentList carry no kind, which the list's kind gives). Other kinds make none."""
    if not isinstance(document, dict):
        return []
    kind = document.get("kind")
    if not isinstance(kind, str):
        return []
    if kind in KINDS:
        return [_one(document, kind, "")]
    items = document.get("items")
    if not kind.endswith("List") or not isinstance(items, list):
        return []
    item_kind = kind.removesuffix("List") or None
    found = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        own = item.get("kind", item_kind)
        if isinstance(own, str) and own in KINDS:
            found.append(_one(item, own, f"{kind} item {index + 1}: "))
    return found
