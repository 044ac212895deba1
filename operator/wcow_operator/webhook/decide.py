"""Admission of pods that use a WindowsRuntimeProfile's RuntimeClass: pure decisions.

``admit(pod, profiles)`` is what the webhook (pod CREATE) and ``wcow admit`` both run;
``admit_update(old, new, profiles)`` is the webhook's pod UPDATE. Each returns the pod as
admitted (a copy; the input is never changed) or a refusal with a reason code and a message
naming the field, its value (bounded and escaped: ``wcow_contract.text.shown``) and the
bound. Any shape of input gives one of the two, never an exception, and the work is bounded
(``webhook.pod_shape``).

A process-isolated pod is checked for its annotations (``webhook.shim_annotations``) and
the builds it pins (``webhook.placement``); a Hyper-V pod is sized from its limits or checked
against its fixed VM (``webhook.sizing``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.webhook.decision import (
    ANNOTATION_CHANGED,
    HOST_PROCESS_HYPERV,
    AdmissionWarning,
    Admitted,
    Decision,
    Refusal,
    Refused,
)
from wcow_operator.webhook.placement import check_process, host_process, placement
from wcow_operator.webhook.pod_shape import pod_spec
from wcow_operator.webhook.shim_annotations import check_annotations, shim_annotations
from wcow_operator.webhook.sizing import (
    check_fits,
    check_not_too_large,
    needs_of,
    set_memory_requests,
    vm_size,
)


def _no_host_process(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> None:
    where = host_process(pod_spec(pod))
    if where is not None:
        raise Refusal(
            HOST_PROCESS_HYPERV,
            f"{where} is true, but RuntimeClass {profile.name!r} runs pods in a Hyper-V utility "
            "VM, and wcow-runtime does not admit HostProcess containers there: runhcs shims "
            "before hcsshim v0.15.0-rc.2 cannot start one in a utility VM, and from v0.15.0-rc.2 "
            "on (the shim of containerd 2.3.3 and later) one runs as SYSTEM inside the utility "
            "VM, without network, and only where the guest supports it, which is not what a "
            "HostProcess container means: drop runtimeClassName or use a process-isolated "
            "RuntimeClass",
        )


def _admit_hyperv(pod: dict[str, Any], profile: WindowsRuntimeProfile) -> Admitted:
    vm = profile.spec.effective_vm()
    assert vm is not None
    _no_host_process(pod, profile)
    facts = check_annotations(pod, profile, vm)
    needs = needs_of(pod)
    warnings = check_fits(pod, needs, vm, facts.sizes, profile.name)
    if vm.sizing != "FromPodLimits":  # charged through the overhead (``webhook.sizing``)
        return Admitted(pod=pod, profile=profile.name, warnings=warnings)
    size = vm_size(needs, vm)
    check_not_too_large(size, vm, facts.sizes, profile.name)
    changes: list[str] = []
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):  # absent or null (any other shape was refused)
        metadata = pod["metadata"] = {}
    for key, value in (
        (ANNOTATION_PROCESSOR_COUNT, size.processors),
        (ANNOTATION_MEMORY_MB, size.memory_mb),
    ):
        if key not in facts.sizes:
            if not isinstance(metadata.get("annotations"), dict):
                metadata["annotations"] = {}
            metadata["annotations"][key] = str(value)
            changes.append(f"metadata.annotations[{key}]={value}")
    if vm.fully_physically_backed or facts.physically_backed:
        changes += set_memory_requests(pod, size.needs)
    return Admitted(pod=pod, changes=tuple(changes), profile=profile.name, warnings=warnings)


def _profile_of(
    pod: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]
) -> WindowsRuntimeProfile | None:
    spec = pod.get("spec")
    class_name = spec.get("runtimeClassName") if isinstance(spec, dict) else None
    return profiles.get(class_name) if isinstance(class_name, str) else None


def admit(pod: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]) -> Decision:
    """The pod as the webhook admits it at CREATE, or why it refuses it. ``profiles`` by
    RuntimeClass name (a profile's RuntimeClass has its name). Pods of other classes come
    back as given."""
    profile = _profile_of(pod, profiles)
    if profile is None:
        return Admitted(pod=dict(pod))
    copied = copy.deepcopy(dict(pod))
    try:
        if profile.spec.isolation == "Process":
            check_annotations(copied, profile, None)
            check_process(copied, profile)
            needs_of(copied)
            return Admitted(pod=copied, profile=profile.name)
        return _admit_hyperv(copied, profile)
    except Refusal as refusal:
        return Refused(reason=refusal.reason, message=refusal.message, profile=profile.name)


def _check_unchanged(
    old: Mapping[str, Any], new: Mapping[str, Any], profile: WindowsRuntimeProfile
) -> None:
    try:
        before = shim_annotations(old, profile)
    except Refusal:
        before = {}  # a stored pod of a shape we cannot read: any shim annotation is new
    after = shim_annotations(new, profile)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        listed = ", ".join(shown(k) for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise Refusal(
            ANNOTATION_CHANGED,
            f"annotation {listed}{more} changed after the pod was created; hcsshim reads "
            "them each time the kubelet creates the pod's sandbox, so they are fixed at "
            "creation: delete the pod and create it again with the new values",
        )


def _ephemeral(pod: Mapping[str, Any]) -> object:
    spec = pod.get("spec")
    return spec.get("ephemeralContainers") if isinstance(spec, dict) else None


def admit_update(
    old: Mapping[str, Any], new: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]
) -> Decision:
    """A pod UPDATE (the validating webhook cannot change the pod, only refuse).

    The kubelet reads the annotations whenever it creates the pod's sandbox (again after a
    sandbox dies), so every annotation hcsshim would get is fixed once the pod exists: a
    change to one is refused. While the pod is scheduling-gated, Kubernetes lets its
    nodeSelector and affinity change: a change there is judged as at CREATE. Every other
    update (labels, finalizers, owner references, ...) passes, even for a pod the current
    profile would refuse, so no pod is ever stuck. Ephemeral containers added to a Hyper-V
    pod (``kubectl debug``) run in its utility VM: a HostProcess one is refused as at
    CREATE, and their images are judged like any image an UPDATE changes."""
    profile = _profile_of(new, profiles)
    if profile is None:
        return Admitted(pod=dict(new))
    try:
        _check_unchanged(old, new, profile)
        if profile.spec.isolation == "HyperV" and _ephemeral(new) != _ephemeral(old):
            # kubectl debug adds containers to the pod's sandbox, here its utility VM
            _no_host_process(new, profile)
    except Refusal as refusal:
        return Refused(reason=refusal.reason, message=refusal.message, profile=profile.name)
    warnings: tuple[AdmissionWarning, ...] = ()
    if placement(old) != placement(new):
        decision = admit(new, profiles)
        if isinstance(decision, Refused):
            return decision
        warnings = decision.warnings
    return Admitted(pod=dict(new), profile=profile.name, warnings=warnings)
