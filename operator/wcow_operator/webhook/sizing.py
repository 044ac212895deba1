"""The VM a Hyper-V pod needs, from its limits, for a profile with ``spec.vm.sizing:
FromPodLimits``:

- per container and resource, its limit, else its request, else nothing;
- the pod's total as Kubernetes counts it (component-helpers ``AggregateContainerRequests``):
  app containers and sidecars (init containers with restartPolicy Always) are summed; each
  other init container runs alone beside the sidecars started before it; the pod needs the
  larger of the two. Pod-level resources (``spec.resources``) are refused
  (``POD_LEVEL_RESOURCES``): the API server forbids them for a pod whose spec.os.name is
  windows ("may not be set for a windows pod", k8s.io/kubernetes v1.35.4
  pkg/apis/core/validation/validation.go) and the Windows kubelet rejects a pod that sets
  them (``PodLevelResourcesNotSupported``, pkg/kubelet/lifecycle/features_windows.go), so such
  a pod never runs;
- processors: the total CPU rounded up to whole processors;
- memory: the total in MiB rounded up, plus the utility VM's own baseline (the memory the
  Baseline overhead policy charges for a VM), rounded up to even MB as hcsshim does;
- never below the profile's processorCount / memoryMB, never above maxProcessorCount /
  maxMemoryMB: a pod that needs more is refused.

The same need judges a VM whose size the pod does not choose through its limits: a ``Fixed``
profile's (processorCount / memoryMB), or the size the pod's own sizing annotations ask for.
A VM smaller than the need is ``VMTooSmall``: refused, or admitted with an admission warning
where the profile's ``spec.vm.oversizedPods`` is ``Warn``.

Memory requests are raised to limits only where the webhook sizes the VM from the limits
(``FromPodLimits``) and the VM is physically backed: the scheduler charges a pod its requests
plus the RuntimeClass overhead (component-helpers ``PodRequests``), and a physically backed
VM commits its whole size at start. A Fixed VM's size does not follow the pod, so it is
charged through the overhead alone (``WholeVM``, the default for a physically backed
profile): raising requests there would charge the containers' memory twice.

Each quantity is decided in microseconds (``wcow_contract.quantity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_contract.quantity import NANO, QuantityError, parse_quantity
from wcow_contract.v1alpha1 import BASELINE_OVERHEAD, VMSpec
from wcow_operator.webhook.decision import (
    INVALID_QUANTITY,
    POD_LEVEL_RESOURCES,
    VM_TOO_LARGE,
    VM_TOO_SMALL,
    AdmissionWarning,
    Refusal,
)
from wcow_operator.webhook.pod_shape import (
    all_containers,
    container_name,
    mapping,
    objects,
    pod_spec,
)

MIB: Final = 2**20

ResourceName = Literal["cpu", "memory"]

RESOURCES: Final[tuple[ResourceName, ...]] = ("cpu", "memory")

BASELINE_MEMORY_MB: Final = -(-parse_quantity(BASELINE_OVERHEAD["memory"]).ceil() // MIB)


@dataclass(frozen=True)
class PodNeeds:
    """What a pod's containers may use, as Kubernetes counts a pod (limits, else requests),
    in nano-units (nanocores, nanobytes: exact, as apimachinery keeps them)."""

    cpu_nanos: int
    memory_nanos: int

    @property
    def processors(self) -> int:
        return -(-self.cpu_nanos // NANO)

    @property
    def memory_mib(self) -> int:
        return -(-self.memory_nanos // (NANO * MIB))


@dataclass(frozen=True)
class VMSize:
    processors: int
    memory_mb: int
    needs: PodNeeds


def _resources(holder: Mapping[str, Any], kind: str, where: str) -> dict[str, Any]:
    return mapping(mapping(holder, "resources", where), kind, f"{where}.resources")


def _counted(holder: Mapping[str, Any], resource: ResourceName, where: str) -> int:
    """The container's limit, else its request, else 0 (nano-units)."""
    for kind in ("limits", "requests"):
        value = _resources(holder, kind, where).get(resource)
        if value is not None:
            try:
                return parse_quantity(value).nanos
            except QuantityError as error:
                field = f"{where}.resources.{kind}.{resource}"
                raise Refusal(INVALID_QUANTITY, f"{field}: {error}") from None
    return 0


def _pod_total(containers: Mapping[str, list[dict[str, Any]]], resource: ResourceName) -> int:
    total = sum(
        _counted(c, resource, f"spec.containers[{container_name(c, i)}]")
        for i, c in enumerate(containers["containers"])
    )
    sidecars = 0
    init_peak = 0
    for i, container in enumerate(containers["initContainers"]):
        value = _counted(
            container, resource, f"spec.initContainers[{container_name(container, i)}]"
        )
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the app
            total += value
            sidecars += value
            running = sidecars
        else:  # runs to completion beside the sidecars started before it
            running = value + sidecars
        init_peak = max(init_peak, running)
    return max(total, init_peak)


def needs_of(pod: Mapping[str, Any]) -> PodNeeds:
    spec = pod_spec(pod)
    containers = all_containers(spec)
    for kind in ("limits", "requests"):
        if _resources(spec, kind, "spec"):
            raise Refusal(
                POD_LEVEL_RESOURCES,
                f"spec.resources.{kind} is set, but a Windows pod cannot have pod-level "
                "resources: the API server refuses them for pods with spec.os.name windows, "
                "and the Windows kubelet rejects the pod (PodLevelResourcesNotSupported), so "
                "it would never run: set the limits on its containers instead",
            )
    values = {resource: _pod_total(containers, resource) for resource in RESOURCES}
    return PodNeeds(cpu_nanos=values["cpu"], memory_nanos=values["memory"])


def pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """CPU and memory the pod's containers may use. Raises ValueError naming the field of a
    value that is not a quantity (or of a part of the pod that has the wrong shape)."""
    try:
        return needs_of(pod)
    except Refusal as refusal:
        raise ValueError(refusal.message) from None


def even_mb(value: int) -> int:
    """hcsshim's rounding of utility VM memory (vmutils normalize: up to 2 MB)."""
    return value + value % 2


def needed_memory_mb(needs: PodNeeds) -> int:
    """The memory (MB) of the smallest VM that holds the pod's memory and its own."""
    return even_mb(needs.memory_mib + BASELINE_MEMORY_MB)


def vm_size(needs: PodNeeds, vm: VMSpec) -> VMSize:
    """The VM a pod needs, never below the profile's size (bounds are checked by the caller,
    so a message can name both the need and the bound)."""
    processors = max(vm.floor_processors, needs.processors)
    memory = max(vm.floor_memory_mb, needed_memory_mb(needs))
    return VMSize(processors=processors, memory_mb=memory, needs=needs)


def check_not_too_large(
    size: VMSize, vm: VMSpec, own: Mapping[str, int], profile_name: str
) -> None:
    needs = size.needs
    assert vm.max_processor_count is not None
    assert vm.max_memory_mb is not None
    if ANNOTATION_PROCESSOR_COUNT not in own and size.processors > vm.max_processor_count:
        raise Refusal(
            VM_TOO_LARGE,
            f"the pod's CPU limits (containers; requests where no limit) total "
            f"{needs.cpu_nanos / NANO:g} cores, a utility VM of {size.processors} processors, "
            f"above spec.vm.maxProcessorCount {vm.max_processor_count} of WindowsRuntimeProfile "
            f"{profile_name!r}: lower the CPU limits to at most {vm.max_processor_count}",
        )
    if ANNOTATION_MEMORY_MB not in own and size.memory_mb > vm.max_memory_mb:
        raise Refusal(
            VM_TOO_LARGE,
            f"the pod's memory limits (containers; requests where no limit) total "
            f"{needs.memory_mib} MiB, a utility VM of {size.memory_mb} MB with the "
            f"VM's own {BASELINE_MEMORY_MB} MB, above spec.vm.maxMemoryMB {vm.max_memory_mb} of "
            f"WindowsRuntimeProfile {profile_name!r}: lower the memory limits to at most "
            f"{vm.max_memory_mb - BASELINE_MEMORY_MB} MiB",
        )


@dataclass(frozen=True)
class _Given:
    """One resource of the VM a pod gets, and what sets it (for messages)."""

    value: int
    source: str


def _given(vm: VMSpec, own: Mapping[str, int], key: str) -> _Given | None:
    """What the pod's VM has of the resource ``key`` sizes; None where the webhook sizes it
    from the limits (then it is never smaller than they need)."""
    memory = key == ANNOTATION_MEMORY_MB
    if key in own:
        value = own[key]
        return _Given(even_mb(value) if memory else value, f"the pod's annotation {key}={value}")
    if vm.sizing == "FromPodLimits":
        return None
    field, set_ = ("memoryMB", vm.memory_mb) if memory else ("processorCount", vm.processor_count)
    unset = "" if set_ is not None else ", unset: hcsshim's default"
    return _Given(vm.floor_memory_mb if memory else vm.floor_processors,
                  f"spec.vm.{field} of the Fixed profile{unset}")  # fmt: skip


def _contributions(pod: Mapping[str, Any], needs: PodNeeds, resource: ResourceName) -> str:
    """Which containers the need comes from, for messages: ``app 2Gi, log 512Mi``."""
    spec = pod_spec(pod)
    found = []
    for field in ("initContainers", "containers"):
        for i, c in enumerate(objects(spec, field, "spec")):
            for kind in ("limits", "requests"):
                value = _resources(c, kind, "").get(resource)
                if value is not None:
                    found.append(f"{container_name(c, i)} {value}")  # a quantity: parsed already
                    break
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    listed = ", ".join(found[:4]) + more
    return listed if len(listed) <= 200 else f"{listed[:197]}..."  # long names, long quantities


def check_fits(
    pod: Mapping[str, Any], needs: PodNeeds, vm: VMSpec, own: Mapping[str, int], name: str
) -> tuple[AdmissionWarning, ...]:
    """VMTooSmall where the VM the pod gets cannot hold its limits: refused, or a warning
    where the profile's spec.vm.oversizedPods is Warn."""
    problems: list[str] = []
    advice: list[str] = []
    cpu = _given(vm, own, ANNOTATION_PROCESSOR_COUNT)
    if cpu is not None and needs.processors > cpu.value:
        problems.append(
            f"the pod's CPU limits ({_contributions(pod, needs, 'cpu')}; requests where no "
            f"limit) total {needs.cpu_nanos / NANO:g} cores, a VM of {needs.processors} "
            f"processors, but its VM has {cpu.value} ({cpu.source})"
        )
        advice.append(f"the CPU limits to at most {cpu.value}")
    memory = _given(vm, own, ANNOTATION_MEMORY_MB)
    if memory is not None and needs.memory_nanos and needed_memory_mb(needs) > memory.value:
        problems.append(
            f"the pod's memory limits ({_contributions(pod, needs, 'memory')}; requests where "
            f"no limit) total {needs.memory_mib} MiB, a VM of {needed_memory_mb(needs)} MB with "
            f"the VM's own {BASELINE_MEMORY_MB} MB, but its VM has {memory.value} MB "
            f"({memory.source})"
        )
        advice.append(
            f"the memory limits to at most {max(memory.value - BASELINE_MEMORY_MB, 0)} MiB"
        )
    if not problems:
        return ()
    found = f"{' and '.join(problems)} (WindowsRuntimeProfile {name!r})"
    if vm.oversized_pods == "Warn":
        warning = (
            f"{found}: admitted because the profile's spec.vm.oversizedPods is Warn; the "
            "containers get only what the VM has, whatever their limits say"
        )
        return (AdmissionWarning(VM_TOO_SMALL, warning),)
    raise Refusal(
        VM_TOO_SMALL,
        f"{found}: lower {' and '.join(advice)}, or use a RuntimeClass with a larger VM "
        "(spec.vm.oversizedPods: Warn on the profile admits such pods with a warning)",
    )


def set_memory_requests(pod: dict[str, Any], needs: PodNeeds) -> list[str]:
    """Physically backed VMs commit their memory at start: charge the node for it by making
    memory requests equal to limits (raising a request is always valid; QoS is computed
    after mutating admission). The pod was walked already: every shape here is valid, and
    every limit a quantity; a request beside a limit is read only here."""
    spec = pod_spec(pod)
    containers = all_containers(spec)
    holders = [
        (f"spec.{field}[{container_name(c, i)}]", c)
        for field in ("initContainers", "containers")
        for i, c in enumerate(containers[field])
    ]
    changes = []
    for where, holder in holders:
        limit = _resources(holder, "limits", where).get("memory")
        if limit is None:
            continue  # counted by its request already: the node is charged what the VM gets
        request = _resources(holder, "requests", where).get("memory")
        if request is not None:
            # Not read by the sizing when a limit is there: a request the API server would
            # refuse is refused here, with its field, rather than replaced or raised on.
            try:
                same = parse_quantity(request).nanos == parse_quantity(limit).nanos
            except QuantityError as error:
                field = f"{where}.resources.requests.memory"
                raise Refusal(INVALID_QUANTITY, f"{field}: {error}") from None
            if same:
                continue
        holder["resources"].setdefault("requests", {})
        if holder["resources"]["requests"] is None:
            holder["resources"]["requests"] = {}
        holder["resources"]["requests"]["memory"] = limit
        changes.append(f"{where}.resources.requests.memory={limit} (was {request or 'unset'})")
    return changes
