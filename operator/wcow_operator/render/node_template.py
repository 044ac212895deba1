"""What a node group of one Windows build must advertise so an autoscaler scales it from zero.

A pod of a gated class selects ``runtime.wcow.dev/<handler>: ready``, a label only the node's
agent sets, once the handler passed its canary. A node group at zero has no node with it, so
cluster-autoscaler (which simulates a node built from the group's template) and Karpenter
(which launches only what a NodePool says its nodes will carry) never scale the group up
unless the template advertises the label. ``node_template`` decides, from the profiles and
the group's build, which classes the group can serve and which labels its template needs,
each with who sets it on a real node; ``autoscaler_snippets`` spells them for each
autoscaler. Sources (kubernetes/autoscaler, cluster-autoscaler, commit 55c37cd of 2026-08):
AWS ``cloudprovider/aws/aws_manager.go`` (``extractLabelsFromAsg``: tags
``k8s.io/cluster-autoscaler/node-template/label/<key>``), Azure
``cloudprovider/azure/azure_template.go`` (``extractLabelsFromTags``: tags
``k8s.io_cluster-autoscaler_node-template_label_<key>``, ``/`` written ``_`` and ``_``
written ``~2``), Cluster API ``cloudprovider/clusterapi/clusterapi_unstructured.go``
(annotation ``capacity.cluster-autoscaler.kubernetes.io/labels``, ``k=v,k2=v2``), startup
taints ``FAQ.md`` ("How does Cluster Autoscaler treat nodes with status/startup/ignore taints").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from wcow_contract.catalog.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WindowsBuild,
    isolation_refusal,
)
from wcow_contract.labels import (
    ARCH_LABEL,
    HYPERV_LABEL,
    NODE_LABEL_PREFIX,
    OS_LABEL,
    READY_LABEL_PREFIX,
)
from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile
from wcow_operator.render.runtimeclass import node_selector

SetBy = Literal["kubelet", "agent", "agent-capability", "node-group"]
AWS_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"
AZURE_LABEL_TAG = "k8s.io_cluster-autoscaler_node-template_label_"
CAPI_LABELS_ANNOTATION = "capacity.cluster-autoscaler.kubernetes.io/labels"
# cluster-autoscaler treats a node with a taint under this prefix as not ready yet (it is
# coming, so no second scale-up) and leaves the taint out of its template simulation.
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"

SET_BY_TEXT: dict[SetBy, str] = {
    "kubelet": "the kubelet, at registration",
    "agent": "the wcow agent, once the handler passed its canary on the node",
    "agent-capability": "the wcow agent, from what it finds on the host",
    "node-group": "your node group (kubelet --node-labels or the pool's node labels)",
}


@dataclass(frozen=True)
class Placement:
    """Whether the group can serve one profile's class, and why not."""

    profile: str
    handler: str
    isolation: str
    guest_build: str | None
    reason: str = ""
    message: str = ""

    @property
    def serves(self) -> bool:
        return not self.reason


@dataclass(frozen=True)
class LabelNeed:
    key: str
    value: str
    set_by: SetBy
    profiles: tuple[str, ...]


@dataclass(frozen=True)
class NodeTemplate:
    host_build: WindowsBuild
    hyperv: bool
    placements: tuple[Placement, ...]
    labels: tuple[LabelNeed, ...]
    conflicts: tuple[str, ...]
    tolerations: tuple[dict[str, Any], ...]

    @property
    def served(self) -> list[Placement]:
        return [p for p in self.placements if p.serves]


def set_by(key: str) -> SetBy:
    if key in (OS_LABEL, ARCH_LABEL, WINDOWS_BUILD_LABEL):
        return "kubelet"
    if key.startswith(READY_LABEL_PREFIX):
        return "agent"
    if key.startswith(NODE_LABEL_PREFIX):
        return "agent-capability"
    return "node-group"


def known_value(key: str, host: WindowsBuild, hyperv: bool) -> str | None:
    """The value every node of the group carries for ``key``, when the group decides it."""
    known = {
        OS_LABEL: "windows",
        ARCH_LABEL: "amd64",
        WINDOWS_BUILD_LABEL: host.label_value,
        HYPERV_LABEL: "true" if hyperv else "false",
    }
    return known.get(key)


def _placement(profile: Profile, host: WindowsBuild, hyperv: bool) -> Placement:
    spec = profile.spec
    guest = spec.guest_build
    base = Placement(
        profile.name, profile.handler, spec.isolation, guest.label_value if guest else None
    )
    refused = isolation_refusal(spec.isolation, guest, host, hyperv)
    if refused is not None:
        return Placement(**{**base.__dict__, "reason": refused[0], "message": refused[1]})
    for key, wanted in node_selector(profile).items():
        have = known_value(key, host, hyperv)
        if have is not None and have != wanted:
            return Placement(
                **{
                    **base.__dict__,
                    "reason": "SelectorMismatch",
                    "message": f"its RuntimeClass selects {key}={wanted}; nodes of this "
                    f"group carry {key}={have}",
                }
            )
    return base


def node_template(profiles: Sequence[Profile], host: WindowsBuild, hyperv: bool) -> NodeTemplate:
    """Which classes a group of ``host`` build (with or without Hyper-V) serves, and the
    labels its template must advertise for them (the union of their RuntimeClasses' node
    selectors; a key two classes want with different values is a conflict: such classes
    need separate groups)."""
    ordered = sorted(profiles, key=lambda p: p.name)
    placements = tuple(_placement(p, host, hyperv) for p in ordered)
    serving = {p.profile for p in placements if p.serves}
    wanted: dict[str, dict[str, list[str]]] = {}
    tolerations: list[dict[str, Any]] = []
    for profile in ordered:
        if profile.name not in serving:
            continue
        for key, value in node_selector(profile).items():
            wanted.setdefault(key, {}).setdefault(value, []).append(profile.name)
        for toleration in profile.spec.scheduling.tolerations or []:
            if (as_dict := toleration.as_kubernetes()) not in tolerations:
                tolerations.append(as_dict)
    labels: list[LabelNeed] = []
    conflicts: list[str] = []
    for key in sorted(wanted):
        values = wanted[key]
        if len(values) > 1:
            conflicts.append(
                f"{key}: "
                + "; ".join(f"{v} for {', '.join(names)}" for v, names in sorted(values.items()))
                + " (these classes need separate node groups)"
            )
        for value, names in sorted(values.items()):
            labels.append(LabelNeed(key, value, set_by(key), tuple(names)))
    labels.sort(key=lambda need: (need.key, need.value))
    return NodeTemplate(
        host, hyperv, placements, tuple(labels), tuple(conflicts), tuple(tolerations)
    )


def _azure_tag(key: str) -> str:
    # azure_template.go decodes "_" as "/" and then "~2" as "_".
    return AZURE_LABEL_TAG + key.replace("_", "~2").replace("/", "_")


def autoscaler_snippets(labels: Iterable[LabelNeed]) -> dict[str, dict[str, str]]:
    """The template labels as each cluster-autoscaler provider reads them: tags of an AWS
    Auto Scaling group, tags of an Azure VM scale set, the Cluster API annotation."""
    needed = [(n.key, n.value) for n in labels]
    return {
        "aws": {AWS_LABEL_TAG + key: value for key, value in needed},
        "azure": {_azure_tag(key): value for key, value in needed},
        "clusterapi": {CAPI_LABELS_ANNOTATION: ",".join(f"{k}={v}" for k, v in needed)},
    }


def ready_labels(template: NodeTemplate) -> list[str]:
    return [f"{n.key}={n.value}" for n in template.labels if n.set_by == "agent"]


def as_document(template: NodeTemplate) -> dict[str, Any]:
    """The decision as data (``wcow node-template -o yaml|json``)."""
    host = template.host_build
    return {
        "hostBuild": host.label_value,
        "release": host.release,
        "hyperv": template.hyperv,
        "classes": [
            {
                "profile": p.profile,
                "handler": p.handler,
                "isolation": p.isolation,
                **({"guestBuild": p.guest_build} if p.guest_build else {}),
                "serves": p.serves,
                **({"reason": p.reason, "message": p.message} if not p.serves else {}),
            }
            for p in template.placements
        ],
        "labels": [
            {
                "key": n.key,
                "value": n.value,
                "setBy": n.set_by,
                **({"profiles": list(n.profiles)} if n.profiles else {}),
            }
            for n in template.labels
        ],
        "conflicts": list(template.conflicts),
        "tolerations": list(template.tolerations),
        "autoscalers": autoscaler_snippets(template.labels),
    }


def as_text(template: NodeTemplate, startup_taint: str) -> str:
    """What a person reads: the classes, the labels with who sets them, what to write in
    each autoscaler, and what a pod does on a new node before its agent is done."""
    host = template.host_build
    name = f" ({host.release})" if host.release else ""
    served = template.served
    lines = [
        f"Node group: Windows build {host.label_value}{name}, Hyper-V "
        f"{'available' if template.hyperv else 'not available'}",
        "",
        f"Classes this group can run ({len(served)} of {len(template.placements)}):",
    ]
    lines += [
        f"  {p.profile}  ({p.isolation}{', guest ' + p.guest_build if p.guest_build else ''})"
        for p in served
    ] or ["  none"]
    refused = [p for p in template.placements if not p.serves]
    if refused:
        lines += ["", "Not for this group:"]
        lines += [f"  {p.profile}: {p.reason}: {p.message}" for p in refused]
    if not served:
        return "\n".join(lines) + "\n"
    lines += ["", "Labels the group's node template must advertise:"]
    width = max(len(f"{n.key}={n.value}") for n in template.labels)
    lines += [
        f"  {f'{n.key}={n.value}':<{width}}  set by {SET_BY_TEXT[n.set_by]}"
        for n in template.labels
    ]
    for conflict in template.conflicts:
        lines.append(f"  conflict: {conflict}")
    if template.tolerations:
        lines += ["", "Taints the group may carry (the classes tolerate them):"]
        lines += [f"  {_toleration_text(t)}" for t in template.tolerations]
    lines += ["", *_snippet_lines(template), "", *_waiting_text(template, startup_taint)]
    return "\n".join(lines) + "\n"


def _toleration_text(toleration: dict[str, Any]) -> str:
    key = toleration.get("key", "<any>")
    value = f"={toleration['value']}" if "value" in toleration else ""
    effect = toleration.get("effect", "<any effect>")
    return f"{key}{value}:{effect} ({toleration.get('operator', 'Equal')})"


def _snippet_lines(template: NodeTemplate) -> list[str]:
    snippets = autoscaler_snippets(template.labels)
    lines = ["cluster-autoscaler on AWS: tags of the Auto Scaling group"]
    lines += [f"  {k}: {v}" for k, v in snippets["aws"].items()]
    lines += ["cluster-autoscaler on Azure: tags of the VM scale set"]
    lines += [f"  {k}: {v}" for k, v in snippets["azure"].items()]
    lines += ["cluster-autoscaler with Cluster API: annotation of the MachineDeployment"]
    lines += [f"  {k}: {v!r}" for k, v in snippets["clusterapi"].items()]
    lines += [
        "Karpenter: the NodePool's spec.template.metadata.labels (Karpenter puts them on the",
        "  Node at registration; the agent removes a ready label whose handler is not proven)",
    ]
    return lines


def _waiting_text(template: NodeTemplate, startup_taint: str) -> list[str]:
    lines = [
        "A pod of a gated class on a new node selects its handler's ready label, which the",
        "agent sets only once the handler passed its canary there: the scheduler keeps the pod",
        "Pending until then; it waits, it does not fail. Register the group's nodes with the",
        "startup taint (kubelet --register-with-taints, or the NodePool's startupTaints):",
        f"  {startup_taint}=pending:NoSchedule",
        "cluster-autoscaler counts a node with it as still starting, so it scales up no second",
        "node while the agent proves the handlers; the agent removes it when its first cycle",
        "has a verdict for every handler of the plan.",
    ]
    if not ready_labels(template):
        lines[:3] = [
            "None of these classes is gated by a ready label: their pods may land on a",
            "new node before its agent has applied the handler, and fail to start a",
            "sandbox until it has. Register the group's nodes with the startup taint",
        ]
        lines[3] = "(kubelet --register-with-taints, or the NodePool's startupTaints):"
    return lines
