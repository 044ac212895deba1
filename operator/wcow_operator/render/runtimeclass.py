"""The RuntimeClass (node.k8s.io/v1) a profile stands for."""

from __future__ import annotations

from typing import Any

from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_LABEL
from wcow_contract.labels import ARCH_LABEL, OS_LABEL, READY_LABEL_PREFIX, READY_VALUE, ready_label
from wcow_contract.v1alpha1 import API_VERSION, KIND
from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile

MANAGED_BY = "wcow-operator"
PART_OF = "wcow-runtime"
PROFILE_LABEL = f"{READY_LABEL_PREFIX}profile"
PROFILE_ANNOTATION = PROFILE_LABEL
LABEL_VALUE_MAX = 63


def common_labels(profile_name: str) -> dict[str, str]:
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": PART_OF}
    if len(profile_name) <= LABEL_VALUE_MAX:  # names may be 253 long; label values 63
        labels[PROFILE_LABEL] = profile_name
    return labels


def node_selector(profile: Profile) -> dict[str, str]:
    """Generated node labels, then the profile's own (validated not to contradict them)."""
    spec = profile.spec
    selector = {OS_LABEL: "windows", ARCH_LABEL: spec.sandbox.platform.split("/", 1)[1]}
    if spec.scheduling.require_ready_label:
        selector[ready_label(profile.handler)] = READY_VALUE
    elif spec.isolation == "Process" and spec.guest_build is not None:
        selector[WINDOWS_BUILD_LABEL] = spec.guest_build.label_value
    selector.update(spec.scheduling.node_selector or {})
    return dict(sorted(selector.items()))


def owner_reference(profile: Profile) -> dict[str, Any] | None:
    """controller=true reference to the profile; None for a profile not from a cluster."""
    if profile.metadata.uid is None:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": profile.name,
        "uid": profile.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_runtime_class(profile: Profile) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": profile.name,
        "labels": common_labels(profile.name),
        "annotations": {PROFILE_ANNOTATION: profile.name},
    }
    owner = owner_reference(profile)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    scheduling: dict[str, Any] = {"nodeSelector": node_selector(profile)}
    tolerations = _unique([t.as_kubernetes() for t in profile.spec.scheduling.tolerations or []])
    if tolerations:
        scheduling["tolerations"] = tolerations
    runtime_class: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": metadata,
        "handler": profile.handler,
        "scheduling": scheduling,
    }
    overhead = profile.spec.effective_overhead()
    if overhead:
        runtime_class["overhead"] = {"podFixed": overhead}
    return runtime_class


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The API server rejects duplicate tolerations; keep the first of each.
    seen: list[dict[str, Any]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
