"""Admission of pods that use a WindowsRuntimeProfile's RuntimeClass: pure decisions.

``admit(pod, profiles)`` is what the webhook and ``wcow admit`` both run. It returns the pod
as admitted (a copy; the input is never changed) or a refusal with a reason code and a
message naming the quantity or annotation, its value and the bound.

The arithmetic (issue 11), for a profile with ``spec.vm.sizing: FromPodLimits``:

- per container and resource, its limit, else its request, else nothing;
- the pod's total as Kubernetes counts it (component-helpers ``AggregateContainerRequests``):
  app containers and sidecars (init containers with restartPolicy Always) are summed; each
  other init container runs alone beside the sidecars started before it; the pod needs the
  larger of the two. Pod-level resources (``spec.resources``), when set, replace the sum;
- processors: the total CPU rounded up to whole processors;
- memory: the total in MiB rounded up, plus the utility VM's own baseline (the memory the
  Baseline overhead policy charges for a VM), rounded up to even MB as hcsshim does;
- never below the profile's processorCount / memoryMB, never above maxProcessorCount /
  maxMemoryMB: a pod that needs more is refused.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal

from wcow_operator.api.v1alpha1 import (
    ANNOTATION_MEMORY_MB,
    ANNOTATION_PROCESSOR_COUNT,
    BASELINE_OVERHEAD,
    VMSpec,
    WindowsRuntimeProfile,
)
from wcow_operator.api.validation import is_quantity
from wcow_operator.api.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WindowsBuild,
    parse_windows_build,
    process_can_run,
)

MIB: Final = 2**20
ResourceName = Literal["cpu", "memory"]
RESOURCES: Final[tuple[ResourceName, ...]] = ("cpu", "memory")

# Why a pod was refused; also the metric label.
VM_TOO_LARGE: Final = "VMTooLarge"
ANNOTATION_OUT_OF_BOUNDS: Final = "AnnotationOutOfBounds"
ANNOTATION_INVALID: Final = "AnnotationInvalid"
HOST_PROCESS_HYPERV: Final = "HostProcessWithHyperV"
WINDOWS_BUILD_MISMATCH: Final = "WindowsBuildMismatch"
INVALID_QUANTITY: Final = "InvalidQuantity"
REASONS: Final = (
    VM_TOO_LARGE,
    ANNOTATION_OUT_OF_BOUNDS,
    ANNOTATION_INVALID,
    HOST_PROCESS_HYPERV,
    WINDOWS_BUILD_MISMATCH,
    INVALID_QUANTITY,
)


class _QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity as an exact number (cores for CPU, bytes for memory)."""
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not is_quantity(text):
        raise _QuantityError(f"{value!r} is not a non-negative Kubernetes quantity")
    match = re.fullmatch(r"\+?([0-9]*\.?[0-9]*)(.*)", text)
    assert match is not None
    number, suffix = Fraction(match.group(1)), match.group(2)
    binary = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
    decimal = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
    if suffix in binary:
        return Fraction(number * 1024 ** binary[suffix])
    if suffix[:1] in ("e", "E"):
        return Fraction(number * Fraction(10) ** int(suffix[1:]))
    return Fraction(number * Fraction(10) ** decimal[suffix])


BASELINE_MEMORY_MB: Final = math.ceil(parse_quantity(BASELINE_OVERHEAD["memory"]) / MIB)


@dataclass(frozen=True)
class Admitted:
    """The pod as admitted; ``changes`` says what was changed (empty: unchanged)."""

    pod: dict[str, Any]
    changes: tuple[str, ...] = ()
    profile: str | None = None

    @property
    def mutated(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Refused:
    reason: str
    message: str
    profile: str


Decision = Admitted | Refused


@dataclass(frozen=True)
class PodNeeds:
    """What a pod's containers may use, as Kubernetes counts a pod (limits, else requests)."""

    cpu: Fraction
    memory: Fraction  # bytes
    source: str  # "containers" or "pod-level resources", for messages


@dataclass(frozen=True)
class VMSize:
    processors: int
    memory_mb: int
    needs: PodNeeds


def _spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def _containers(spec: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    items = spec.get(field)
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def _resources(holder: Mapping[str, Any], kind: str) -> dict[str, Any]:
    resources = holder.get("resources")
    if not isinstance(resources, dict):
        return {}
    found = resources.get(kind)
    return found if isinstance(found, dict) else {}


def _counted(holder: Mapping[str, Any], resource: ResourceName, where: str) -> Fraction:
    """The container's limit, else its request, else 0."""
    for kind in ("limits", "requests"):
        value = _resources(holder, kind).get(resource)
        if value is not None:
            try:
                return parse_quantity(value)
            except _QuantityError as error:
                raise _QuantityError(f"{where}.resources.{kind}.{resource}: {error}") from None
    return Fraction(0)


def _pod_total(spec: Mapping[str, Any], resource: ResourceName) -> Fraction:
    total = sum(
        (
            _counted(c, resource, f"spec.containers[{c.get('name', i)}]")
            for i, c in enumerate(_containers(spec, "containers"))
        ),
        Fraction(0),
    )
    sidecars = Fraction(0)
    init_peak = Fraction(0)
    for i, container in enumerate(_containers(spec, "initContainers")):
        value = _counted(container, resource, f"spec.initContainers[{container.get('name', i)}]")
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the app
            total += value
            sidecars += value
            running = sidecars
        else:  # runs to completion beside the sidecars started before it
            running = value + sidecars
        init_peak = max(init_peak, running)
    return max(total, init_peak)


def pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """CPU (cores) and memory (bytes) the pod's containers may use. Raises ValueError naming
    the field of a quantity that is not one."""
    spec = _spec(pod)
    values: dict[ResourceName, Fraction] = {}
    pod_level = False
    for resource in RESOURCES:
        if any(_resources(spec, kind).get(resource) is not None for kind in ("limits", "requests")):
            values[resource] = _counted(spec, resource, "spec")
            pod_level = True
        else:
            values[resource] = _pod_total(spec, resource)
    source = "pod-level resources" if pod_level else "containers"
    return PodNeeds(cpu=values["cpu"], memory=values["memory"], source=source)


def even_mb(value: int) -> int:
    """hcsshim's rounding of utility VM memory (vmutils normalize: up to 2 MB)."""
    return value + value % 2


def vm_size(needs: PodNeeds, vm: VMSpec) -> VMSize:
    """The VM a pod needs, never below the profile's size (bounds are checked by the caller,
    so a message can name both the need and the bound)."""
    processors = max(vm.floor_processors, math.ceil(needs.cpu))
    memory = max(vm.floor_memory_mb, even_mb(math.ceil(needs.memory / MIB) + BASELINE_MEMORY_MB))
    return VMSize(processors=processors, memory_mb=memory, needs=needs)


# -- Go path.Match, for containerd's pod_annotations allow-list ----------------------------


def _glob_regex(pattern: str) -> re.Pattern[str] | None:
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                return None  # malformed: containerd ignores the error and matches nothing
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append(f"[{'^' if negate else ''}{body.replace(chr(92), chr(92) * 2)}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return None


def allowed_through(key: str, patterns: Iterable[str]) -> bool:
    """Whether containerd passes pod annotation ``key`` to the shim (path.Match per pattern)."""
    for pattern in patterns:
        regex = _glob_regex(pattern)
        if regex is not None and regex.fullmatch(key):
            return True
    return False


# -- the decision ---------------------------------------------------------------------------


def _annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata")
    found = metadata.get("annotations") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def _refuse(reason: str, profile: WindowsRuntimeProfile, message: str) -> Refused:
    return Refused(reason=reason, message=message, profile=profile.name)


def _host_process(spec: Mapping[str, Any]) -> str | None:
    """Where the pod asks for a HostProcess container, or None."""

    def flag(holder: Mapping[str, Any]) -> bool:
        context = holder.get("securityContext")
        options = context.get("windowsOptions") if isinstance(context, dict) else None
        return isinstance(options, dict) and options.get("hostProcess") is True

    if flag(spec):
        return "spec.securityContext.windowsOptions.hostProcess"
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(_containers(spec, field)):
            if flag(container):
                name = container.get("name", i)
                return f"spec.{field}[{name}].securityContext.windowsOptions.hostProcess"
    return None


def _pinned_builds(spec: Mapping[str, Any]) -> tuple[str, list[list[str]]] | None:
    """How the pod pins node.kubernetes.io/windows-build: (where, allowed values per
    alternative); an alternative of None values means "any". None when it does not pin."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and isinstance(selector.get(WINDOWS_BUILD_LABEL), str):
        return "spec.nodeSelector", [[selector[WINDOWS_BUILD_LABEL]]]
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if node else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not terms:
        return None
    alternatives: list[list[str]] = []
    for term in terms:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        pins = [
            e
            for e in expressions or []
            if isinstance(e, dict) and e.get("key") == WINDOWS_BUILD_LABEL
            and e.get("operator") == "In"
        ]  # fmt: skip
        if not pins:
            return None  # this alternative lets any build through
        values = set(pins[0].get("values") or [])
        for other in pins[1:]:
            values &= set(other.get("values") or [])
        alternatives.append(sorted(values))
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    return where, alternatives


def _build_runs(value: str, guest: WindowsBuild) -> bool:
    try:
        host = parse_windows_build(value)
    except ValueError:
        return False
    return value == host.label_value and process_can_run(host, guest)


def _check_process(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> Refused | None:
    guest = profile.spec.guest_build
    pinned = _pinned_builds(_spec(pod))
    if guest is None or pinned is None:
        return None
    where, alternatives = pinned
    if any(_build_runs(v, guest) for values in alternatives for v in values):
        return None
    asked = sorted({v for values in alternatives for v in values})
    return _refuse(
        WINDOWS_BUILD_MISMATCH,
        profile,
        f"{where} pins {WINDOWS_BUILD_LABEL} to {', '.join(asked) or 'no value'}, but "
        f"RuntimeClass {profile.name!r} runs process-isolated containers built for "
        f"{guest.label_value} ({profile.spec.windows_build}), which no such host can run: "
        f"pin {guest.label_value}, drop the pin, or use a Hyper-V RuntimeClass",
    )


def _annotation_value(key: str, raw: object, profile: WindowsRuntimeProfile) -> int | Refused:
    text = raw if isinstance(raw, str) else str(raw)
    if not re.fullmatch(r"[0-9]{1,10}", text) or int(text) == 0:
        return _refuse(
            ANNOTATION_INVALID,
            profile,
            f"annotation {key}={text!r} is not a positive whole number: hcsshim would ignore "
            "it and use the profile's size; write a number such as 4",
        )
    return int(text)


def _check_annotation(
    key: str,
    value: int,
    *,
    bound: int,
    unit: str,
    field: str,
    profile: WindowsRuntimeProfile,
) -> Refused | None:
    effective = even_mb(value) if key == ANNOTATION_MEMORY_MB else value
    if effective <= bound:
        return None
    rounded = f" (rounded up to {effective})" if effective != value else ""
    where = f"spec.vm.{field} {bound} {unit}"
    if not field.startswith("max"):
        maximum = "maxProcessorCount" if key == ANNOTATION_PROCESSOR_COUNT else "maxMemoryMB"
        where = (
            f"the {bound} {unit} of a Fixed profile without spec.vm.{maximum} "
            f"(spec.vm.{field}{'' if _is_set(profile, field) else ', unset: hcsshim default'})"
        )
        advice = f"ask for at most {bound}, or have spec.vm.{maximum} set on the profile"
    else:
        advice = f"ask for at most {bound}"
    return _refuse(
        ANNOTATION_OUT_OF_BOUNDS,
        profile,
        f"annotation {key}={value}{rounded} asks for more than {where} "
        f"of WindowsRuntimeProfile {profile.name!r}: {advice}",
    )


def _is_set(profile: WindowsRuntimeProfile, field: str) -> bool:
    vm = profile.spec.vm
    attribute = "processor_count" if field == "processorCount" else "memory_mb"
    return vm is not None and getattr(vm, attribute) is not None


def _annotation_bounds(vm: VMSpec) -> tuple[tuple[str, int, str, str], ...]:
    """Per sizing annotation: the largest value a pod may ask for, its unit and the field
    that sets it. Without maxProcessorCount/maxMemoryMB (only possible on a Fixed profile) the
    profile's own size is the most: a pod may make its VM smaller, never larger than the
    platform team configured."""
    return (
        (ANNOTATION_PROCESSOR_COUNT, *(
            (vm.max_processor_count, "maxProcessorCount") if vm.max_processor_count
            else (vm.floor_processors, "processorCount")
        ), "processors"),
        (ANNOTATION_MEMORY_MB, *(
            (vm.max_memory_mb, "maxMemoryMB") if vm.max_memory_mb
            else (vm.floor_memory_mb, "memoryMB")
        ), "MB"),
    )  # fmt: skip


def _own_annotations(
    pod: Mapping[str, Any], profile: WindowsRuntimeProfile, vm: VMSpec
) -> dict[str, int] | Refused:
    """The pod's own sizing annotations that reach the shim, each checked."""
    annotations = _annotations(pod)
    passes = profile.spec.pod_annotation_patterns()
    own: dict[str, int] = {}
    for key, bound, field, unit in _annotation_bounds(vm):
        if key not in annotations or not allowed_through(key, passes):
            continue  # containerd drops what the handler does not let through
        value = _annotation_value(key, annotations[key], profile)
        if isinstance(value, Refused):
            return value
        refused = _check_annotation(
            key, value, bound=bound, unit=unit, field=field, profile=profile
        )
        if refused is not None:
            return refused
        own[key] = value
    return own


def _too_large(
    size: VMSize, vm: VMSpec, own: Mapping[str, int], profile: WindowsRuntimeProfile
) -> Refused | None:
    needs = size.needs
    assert vm.max_processor_count is not None
    assert vm.max_memory_mb is not None
    if ANNOTATION_PROCESSOR_COUNT not in own and size.processors > vm.max_processor_count:
        return _refuse(
            VM_TOO_LARGE,
            profile,
            f"the pod's CPU limits ({needs.source}; requests where no limit) total "
            f"{float(needs.cpu):g} cores, a utility VM of {size.processors} processors, above "
            f"spec.vm.maxProcessorCount {vm.max_processor_count} of WindowsRuntimeProfile "
            f"{profile.name!r}: lower the CPU limits to at most {vm.max_processor_count}",
        )
    if ANNOTATION_MEMORY_MB not in own and size.memory_mb > vm.max_memory_mb:
        return _refuse(
            VM_TOO_LARGE,
            profile,
            f"the pod's memory limits ({needs.source}; requests where no limit) total "
            f"{math.ceil(needs.memory / MIB)} MiB, a utility VM of {size.memory_mb} MB with the "
            f"VM's own {BASELINE_MEMORY_MB} MB, above spec.vm.maxMemoryMB {vm.max_memory_mb} of "
            f"WindowsRuntimeProfile {profile.name!r}: lower the memory limits to at most "
            f"{vm.max_memory_mb - BASELINE_MEMORY_MB} MiB",
        )
    return None


def _set_memory_requests(pod: dict[str, Any], needs: PodNeeds) -> list[str]:
    """Physically backed VMs commit their memory at start: charge the node for it by making
    memory requests equal to limits (raising a request is always valid; QoS is computed
    after mutating admission)."""
    spec = _spec(pod)
    holders: list[tuple[str, dict[str, Any]]]
    if needs.source == "pod-level resources":
        holders = [("spec", spec)]
    else:
        holders = [
            (f"spec.{field}[{c.get('name', i)}]", c)
            for field in ("initContainers", "containers")
            for i, c in enumerate(_containers(spec, field))
        ]
    changes = []
    for where, holder in holders:
        limit = _resources(holder, "limits").get("memory")
        if limit is None:
            continue  # counted by its request already: the node is charged what the VM gets
        request = _resources(holder, "requests").get("memory")
        if request is not None and parse_quantity(request) == parse_quantity(limit):
            continue
        holder["resources"].setdefault("requests", {})["memory"] = limit
        changes.append(f"{where}.resources.requests.memory={limit} (was {request or 'unset'})")
    return changes


def _admit_hyperv(pod: dict[str, Any], profile: WindowsRuntimeProfile) -> Decision:
    vm = profile.spec.effective_vm()
    assert vm is not None
    own = _own_annotations(pod, profile, vm)
    if isinstance(own, Refused):
        return own
    if vm.sizing != "FromPodLimits":
        return Admitted(pod=pod, profile=profile.name)
    try:
        size = vm_size(pod_needs(pod), vm)
    except _QuantityError as error:
        return _refuse(INVALID_QUANTITY, profile, str(error))
    refused = _too_large(size, vm, own, profile)
    if refused is not None:
        return refused
    changes: list[str] = []
    metadata = pod.setdefault("metadata", {})
    for key, value in (
        (ANNOTATION_PROCESSOR_COUNT, size.processors),
        (ANNOTATION_MEMORY_MB, size.memory_mb),
    ):
        if key not in own:
            if not isinstance(metadata.get("annotations"), dict):
                metadata["annotations"] = {}
            metadata["annotations"][key] = str(value)
            changes.append(f"metadata.annotations[{key}]={value}")
    if vm.fully_physically_backed:
        changes += _set_memory_requests(pod, size.needs)
    return Admitted(pod=pod, changes=tuple(changes), profile=profile.name)


def admit(pod: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]) -> Decision:
    """The pod as the webhook admits it, or why it refuses it. ``profiles`` by RuntimeClass
    name (a profile's RuntimeClass has its name). Pods of other classes come back as given."""
    copied = copy.deepcopy(dict(pod))
    class_name = _spec(copied).get("runtimeClassName")
    profile = profiles.get(class_name) if isinstance(class_name, str) else None
    if profile is None:
        return Admitted(pod=copied)
    if profile.spec.isolation == "Process":
        refused = _check_process(copied, profile)
        return refused or Admitted(pod=copied, profile=profile.name)
    where = _host_process(_spec(copied))
    if where is not None:
        return _refuse(
            HOST_PROCESS_HYPERV,
            profile,
            f"{where} is true, but RuntimeClass {profile.name!r} runs pods in a Hyper-V utility "
            "VM, where a HostProcess container (which runs on the host itself) cannot start: "
            "drop runtimeClassName or use a process-isolated RuntimeClass",
        )
    return _admit_hyperv(copied, profile)
