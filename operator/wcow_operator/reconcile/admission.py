"""Admission of pods that use a WindowsRuntimeProfile's RuntimeClass: pure decisions.

``admit(pod, profiles)`` is what the webhook (pod CREATE) and ``wcow admit`` both run;
``admit_update(old, new, profiles)`` is the webhook's pod UPDATE. Each returns the pod as
admitted (a copy; the input is never changed) or a refusal with a reason code and a message
naming the field, its value (bounded and escaped: ``api.text.shown``) and the bound. Any
shape of input gives one of the two, never an exception, and the work is bounded: at most
``MAX_CONTAINERS`` containers, ``MAX_ANNOTATIONS`` annotations and ``MAX_SELECTOR_ITEMS``
node-affinity items are walked (more is refused as ``PodTooLarge``), and each quantity is
decided in microseconds (``api.quantity``).

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

Annotations hcsshim reads (``api.hcs_annotations``) are checked on every wcow pod whose
handler lets them through: bounded ones against the profile, opt-in ones refused unless the
profile lists the exact key in ``spec.annotations.pod``.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from wcow_contract.catalog import hcs_annotations as hcs
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_contract.catalog.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WindowsBuild,
    parse_windows_build,
    process_can_run,
)
from wcow_contract.quantity import NANO, QuantityError, parse_quantity
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import BASELINE_OVERHEAD, VMSpec, WindowsRuntimeProfile

MIB: Final = 2**20
ResourceName = Literal["cpu", "memory"]
RESOURCES: Final[tuple[ResourceName, ...]] = ("cpu", "memory")

# What one decision walks at most. A pod object is at most ~1.5 MB (etcd) and the webhook
# reads at most 1 MiB (aiohttp's client_max_size in kopf's server); these keep the walk far
# inside the 50 ms the issue allows per pod of 100 containers, on any body that fits.
MAX_CONTAINERS: Final = 256  # containers + initContainers + ephemeralContainers
MAX_ANNOTATIONS: Final = 1024
MAX_SELECTOR_ITEMS: Final = 1024  # node affinity terms, expressions and values together

# Why a pod was refused; also the metric label.
VM_TOO_LARGE: Final = "VMTooLarge"
VM_TOO_SMALL: Final = "VMTooSmall"
ANNOTATION_OUT_OF_BOUNDS: Final = "AnnotationOutOfBounds"
ANNOTATION_INVALID: Final = "AnnotationInvalid"
ANNOTATION_NOT_ALLOWED: Final = "AnnotationNotAllowed"
ANNOTATION_CHANGED: Final = "AnnotationChanged"
HOST_PROCESS_HYPERV: Final = "HostProcessWithHyperV"
WINDOWS_BUILD_MISMATCH: Final = "WindowsBuildMismatch"
INVALID_QUANTITY: Final = "InvalidQuantity"
MALFORMED_POD: Final = "MalformedPod"
POD_TOO_LARGE: Final = "PodTooLarge"
REASONS: Final = (
    VM_TOO_LARGE,
    VM_TOO_SMALL,
    ANNOTATION_OUT_OF_BOUNDS,
    ANNOTATION_INVALID,
    ANNOTATION_NOT_ALLOWED,
    ANNOTATION_CHANGED,
    HOST_PROCESS_HYPERV,
    WINDOWS_BUILD_MISMATCH,
    INVALID_QUANTITY,
    MALFORMED_POD,
    POD_TOO_LARGE,
)

BASELINE_MEMORY_MB: Final = -(-parse_quantity(BASELINE_OVERHEAD["memory"]).ceil() // MIB)


@dataclass(frozen=True)
class AdmissionWarning:
    """A warning the API server passes to the client (kubectl prints it) with the pod."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclass(frozen=True)
class Admitted:
    """The pod as admitted; ``changes`` says what was changed (empty: unchanged)."""

    pod: dict[str, Any]
    changes: tuple[str, ...] = ()
    profile: str | None = None
    warnings: tuple[AdmissionWarning, ...] = ()

    @property
    def mutated(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Refused:
    reason: str
    message: str
    profile: str


Decision = Admitted | Refused


class _Refusal(Exception):  # noqa: N818 - control flow inside admit(), never escapes it
    """Raised deep in the walk; admit() turns it into a Refused for the pod's profile."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# -- reading a pod of any shape -----------------------------------------------------------------


def _mapping(holder: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``holder[key]`` as an object: absent or null is empty, another type is refused."""
    found = holder.get(key)
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise _Refusal(MALFORMED_POD, f"{where}.{key} is {shown(found)}, not an object")
    return found


def _sequence(holder: Mapping[str, Any], key: str, where: str) -> list[Any]:
    found = holder.get(key)
    if found is None:
        return []
    if not isinstance(found, list):
        raise _Refusal(MALFORMED_POD, f"{where}.{key} is {shown(found)}, not a list")
    return found


def _objects(holder: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = _sequence(holder, key, where)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _Refusal(MALFORMED_POD, f"{where}.{key}[{index}] is {shown(item)}, not an object")
    return items


def _name(container: Mapping[str, Any], index: int) -> str:
    """A container as messages name it: its name when it is a plain DNS label, else its index."""
    name = container.get("name")
    if isinstance(name, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        return name
    return str(index)


def _metadata(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _mapping(pod, "metadata", "")


def _spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _mapping(pod, "spec", "")


def _annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    found = _mapping(_metadata(pod), "annotations", "metadata")
    if len(found) > MAX_ANNOTATIONS:
        raise _Refusal(
            POD_TOO_LARGE,
            f"metadata.annotations has {len(found)} entries; a pod of a wcow RuntimeClass may "
            f"have at most {MAX_ANNOTATIONS}",
        )
    return found


CONTAINER_FIELDS: Final = ("initContainers", "containers", "ephemeralContainers")


def _all_containers(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found = {field: _objects(spec, field, "spec") for field in CONTAINER_FIELDS}
    count = sum(len(items) for items in found.values())
    if count > MAX_CONTAINERS:
        raise _Refusal(
            POD_TOO_LARGE,
            f"the pod has {count} containers (init and ephemeral included); a pod of a wcow "
            f"RuntimeClass may have at most {MAX_CONTAINERS}",
        )
    return found


# -- quantities and the VM a pod needs ------------------------------------------------------------


@dataclass(frozen=True)
class PodNeeds:
    """What a pod's containers may use, as Kubernetes counts a pod (limits, else requests),
    in nano-units (nanocores, nanobytes: exact, as apimachinery keeps them)."""

    cpu_nanos: int
    memory_nanos: int
    source: str  # "containers" or "pod-level resources", for messages

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
    return _mapping(_mapping(holder, "resources", where), kind, f"{where}.resources")


def _counted(holder: Mapping[str, Any], resource: ResourceName, where: str) -> int:
    """The container's limit, else its request, else 0 (nano-units)."""
    for kind in ("limits", "requests"):
        value = _resources(holder, kind, where).get(resource)
        if value is not None:
            try:
                return parse_quantity(value).nanos
            except QuantityError as error:
                field = f"{where}.resources.{kind}.{resource}"
                raise _Refusal(INVALID_QUANTITY, f"{field}: {error}") from None
    return 0


def _pod_total(containers: Mapping[str, list[dict[str, Any]]], resource: ResourceName) -> int:
    total = sum(
        _counted(c, resource, f"spec.containers[{_name(c, i)}]")
        for i, c in enumerate(containers["containers"])
    )
    sidecars = 0
    init_peak = 0
    for i, container in enumerate(containers["initContainers"]):
        value = _counted(container, resource, f"spec.initContainers[{_name(container, i)}]")
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the app
            total += value
            sidecars += value
            running = sidecars
        else:  # runs to completion beside the sidecars started before it
            running = value + sidecars
        init_peak = max(init_peak, running)
    return max(total, init_peak)


def _pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    spec = _spec(pod)
    containers = _all_containers(spec)
    values: dict[ResourceName, int] = {}
    pod_level = False
    for resource in RESOURCES:
        kinds = ("limits", "requests")
        if any(_resources(spec, kind, "spec").get(resource) is not None for kind in kinds):
            values[resource] = _counted(spec, resource, "spec")
            pod_level = True
        else:
            values[resource] = _pod_total(containers, resource)
    source = "pod-level resources" if pod_level else "containers"
    return PodNeeds(cpu_nanos=values["cpu"], memory_nanos=values["memory"], source=source)


def pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """CPU and memory the pod's containers may use. Raises ValueError naming the field of a
    value that is not a quantity (or of a part of the pod that has the wrong shape)."""
    try:
        return _pod_needs(pod)
    except _Refusal as refusal:
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


# -- Go path.Match, for containerd's pod_annotations allow-list ----------------------------


@functools.lru_cache(maxsize=512)
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


# -- annotations hcsshim reads -------------------------------------------------------------------

_GO_BOOLS: Final = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                    "0": False, "f": False, "F": False, "FALSE": False, "false": False,
                    "False": False}  # fmt: skip  # strconv.ParseBool


def shim_annotations(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> dict[str, Any]:
    """The pod's annotations that reach hcsshim: under its prefixes and let through by the
    handler's pod_annotations (containerd drops the rest)."""
    patterns = profile.spec.pod_annotation_patterns()
    return {
        key: value
        for key, value in _annotations(pod).items()
        if isinstance(key, str) and hcs.is_hcs_key(key) and allowed_through(key, patterns)
    }


@dataclass(frozen=True)
class _Bounds:
    """What a pod of this profile may ask for through annotations."""

    processors: tuple[int, str]  # the bound and the field that sets it
    memory_mb: tuple[int, str]
    processor_limit: int
    processor_weight: int


def _profile_defaults(profile: WindowsRuntimeProfile) -> dict[str, str]:
    """The handler's own DefaultContainerAnnotations (what a pod's annotation would replace)."""
    spec = profile.spec
    vm = spec.effective_vm()
    options = (spec.containerd.options or {}).get("DefaultContainerAnnotations") or {}
    return {**(vm.container_annotations() if vm else {}), **options}


def _bounds(vm: VMSpec, defaults: Mapping[str, str]) -> _Bounds:
    """Without maxProcessorCount/maxMemoryMB (only possible on a Fixed profile) the profile's
    own size is the most: a pod may make its VM smaller, never larger than the platform team
    configured. Limit and weight: at most what the handler sets, else hcsshim's full limit
    and the weight every other sandbox gets."""

    def number(key: str, default: int) -> int:
        text = defaults.get(key)
        return int(text) if isinstance(text, str) and text.isdigit() else default

    return _Bounds(
        processors=(vm.max_processor_count, "maxProcessorCount") if vm.max_processor_count
        else (vm.floor_processors, "processorCount"),
        memory_mb=(vm.max_memory_mb, "maxMemoryMB") if vm.max_memory_mb
        else (vm.floor_memory_mb, "memoryMB"),
        processor_limit=number(hcs.PROCESSOR_LIMIT, hcs.PROCESSOR_LIMIT_MAX),
        processor_weight=number(hcs.PROCESSOR_WEIGHT, hcs.SANDBOX_DEFAULT_WEIGHT),
    )  # fmt: skip


def _whole_number(key: str, value: str, *, positive: bool) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", value) or (positive and int(value) == 0):
        kind = "positive whole number" if positive else "whole number"
        raise _Refusal(
            ANNOTATION_INVALID,
            f"annotation {key}={shown(value)} is not a {kind}: hcsshim would ignore it and "
            "use the profile's setting; write a number such as 4",
        )
    return int(value)


def _boolean(key: str, value: str) -> bool:
    if value not in _GO_BOOLS:
        raise _Refusal(
            ANNOTATION_INVALID,
            f"annotation {key}={shown(value)} is not true or false: hcsshim would ignore it",
        )
    return _GO_BOOLS[value]


@dataclass(frozen=True)
class _AnnotationFacts:
    """What a pod's own annotations decide: its VM size where it sets one, and whether
    its VM commits all its memory at start."""

    sizes: dict[str, int]
    physically_backed: bool


def _check_annotations(
    pod: Mapping[str, Any], profile: WindowsRuntimeProfile, vm: VMSpec | None
) -> _AnnotationFacts:
    """Each annotation that reaches hcsshim, judged by the catalogue; _Refusal at the
    first that may not pass."""
    listed = set(profile.spec.pod_annotation_patterns())  # opt-in: the exact key is listed
    defaults = _profile_defaults(profile)
    sizes: dict[str, int] = {}
    backed = False
    for key, raw in sorted(shim_annotations(pod, profile).items()):
        entry = hcs.entry_for(key)
        if entry.treatment == "OptIn":
            if key in listed:
                continue
            raise _Refusal(
                ANNOTATION_NOT_ALLOWED,
                f"annotation {shown(key)} ({entry.why}) may be set by a pod only where "
                f"WindowsRuntimeProfile {profile.name!r} lists that exact key in "
                "spec.annotations.pod (a wildcard does not count): remove it from the pod",
            )
        if not isinstance(raw, str):
            raise _Refusal(ANNOTATION_INVALID, f"annotation {key} is {shown(raw)}, not a string")
        if entry.kind == "bool":
            flag = _boolean(key, raw)
            if key == hcs.HOST_PROCESS and flag:
                raise _Refusal(
                    ANNOTATION_NOT_ALLOWED,
                    f"annotation {key}=true asks for a HostProcess container by annotation; "
                    "HostProcess is requested only by securityContext.windowsOptions."
                    "hostProcess (which Pod Security admission checks): remove the annotation",
                )
            committed = (key == hcs.PHYSICALLY_BACKED and flag) or (
                key == hcs.ALLOW_OVERCOMMIT and not flag
            )
            if committed and vm is not None:
                _check_backed(key, raw, profile, vm, listed)
                backed = True
        elif entry.kind == "count":
            bounded = entry.treatment == "Bounded"
            value = _whole_number(key, raw, positive=bounded)
            if bounded and vm is not None:
                _check_bound(key, value, _bounds(vm, defaults), profile)
                if key in (ANNOTATION_PROCESSOR_COUNT, ANNOTATION_MEMORY_MB):
                    sizes[key] = value
    return _AnnotationFacts(sizes=sizes, physically_backed=backed)


def _check_backed(
    key: str, raw: str, profile: WindowsRuntimeProfile, vm: VMSpec, listed: set[str]
) -> None:
    """A VM that commits its memory must be charged to the node: FromPodLimits raises the
    pod's memory requests to its limits (as for a profile that backs memory); a Fixed VM is
    charged only through the RuntimeClass overhead, which covers it only where the profile
    backs memory itself (WholeVM by default)."""
    if vm.sizing == "FromPodLimits" or vm.fully_physically_backed or key in listed:
        return
    raise _Refusal(
        ANNOTATION_NOT_ALLOWED,
        f"annotation {key}={shown(raw)} commits all of the VM's {vm.floor_memory_mb} MB at "
        f"start, but WindowsRuntimeProfile {profile.name!r} (sizing Fixed) charges the node "
        "for a virtually backed VM: remove the annotation, or use a profile with "
        "spec.vm.fullyPhysicallyBacked or sizing FromPodLimits",
    )


def _check_bound(key: str, value: int, bounds: _Bounds, profile: WindowsRuntimeProfile) -> None:
    if key in (ANNOTATION_PROCESSOR_COUNT, ANNOTATION_MEMORY_MB):
        _check_size(key, value, bounds, profile)
        return
    if key == hcs.PROCESSOR_LIMIT:
        bound, what = bounds.processor_limit, "the profile's spec.vm.processorLimit"
        if bound == hcs.PROCESSOR_LIMIT_MAX:
            what = "hcsshim's maximum (100 %)"
    else:
        bound, what = bounds.processor_weight, "the profile's spec.vm.processorWeight"
        if key == hcs.PROCESSOR_WEIGHT and bound == hcs.SANDBOX_DEFAULT_WEIGHT:
            what = (
                "the weight every other sandbox gets (containerd's default CPU shares; "
                "the profile sets no spec.vm.processorWeight)"
            )
    if value > bound:
        raise _Refusal(
            ANNOTATION_OUT_OF_BOUNDS,
            f"annotation {key}={value} asks for more than {bound}, {what}, of "
            f"WindowsRuntimeProfile {profile.name!r}: ask for at most {bound}",
        )


def _check_size(key: str, value: int, bounds: _Bounds, profile: WindowsRuntimeProfile) -> None:
    bound, field = bounds.processors if key == ANNOTATION_PROCESSOR_COUNT else bounds.memory_mb
    unit = "processors" if key == ANNOTATION_PROCESSOR_COUNT else "MB"
    effective = even_mb(value) if key == ANNOTATION_MEMORY_MB else value
    if effective <= bound:
        return
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
    raise _Refusal(
        ANNOTATION_OUT_OF_BOUNDS,
        f"annotation {key}={value}{rounded} asks for more than {where} "
        f"of WindowsRuntimeProfile {profile.name!r}: {advice}",
    )


def _is_set(profile: WindowsRuntimeProfile, field: str) -> bool:
    vm = profile.spec.vm
    attribute = "processor_count" if field == "processorCount" else "memory_mb"
    return vm is not None and getattr(vm, attribute) is not None


# -- HostProcess and process-isolated builds ------------------------------------------------------


def _host_process(spec: Mapping[str, Any]) -> str | None:
    """Where the pod asks for a HostProcess container, or None."""

    def flag(holder: Mapping[str, Any], where: str) -> bool:
        context = _mapping(holder, "securityContext", where)
        options = _mapping(context, "windowsOptions", f"{where}.securityContext")
        return options.get("hostProcess") is True

    if flag(spec, "spec"):
        return "spec.securityContext.windowsOptions.hostProcess"
    for field, items in _all_containers(spec).items():
        for i, container in enumerate(items):
            where = f"spec.{field}[{_name(container, i)}]"
            if flag(container, where):
                return f"{where}.securityContext.windowsOptions.hostProcess"
    return None


_REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _pinned_builds(spec: Mapping[str, Any]) -> tuple[str, list[list[str]]] | None:
    """How the pod pins node.kubernetes.io/windows-build: (where, allowed values per
    alternative). None when it does not pin (some alternative lets any build through)."""
    selector = _mapping(spec, "nodeSelector", "spec")
    pinned = selector.get(WINDOWS_BUILD_LABEL)
    if isinstance(pinned, str):
        return "spec.nodeSelector", [[pinned]]
    node = _mapping(_mapping(spec, "affinity", "spec"), "nodeAffinity", "spec.affinity")
    required = _mapping(node, "requiredDuringSchedulingIgnoredDuringExecution",
                        "spec.affinity.nodeAffinity")  # fmt: skip
    terms = _objects(required, "nodeSelectorTerms", _REQUIRED)
    if not terms:
        return None
    walked = len(terms)
    alternatives: list[list[str]] = []
    for t, term in enumerate(terms):
        where = f"{_REQUIRED}.nodeSelectorTerms[{t}]"
        expressions = _objects(term, "matchExpressions", where)
        walked += len(expressions)
        sets: list[set[str]] = []
        for e, expression in enumerate(expressions):
            if expression.get("key") != WINDOWS_BUILD_LABEL or expression.get("operator") != "In":
                continue
            values = _sequence(expression, "values", f"{where}.matchExpressions[{e}]")
            walked += len(values)
            _within_selector_bound(walked)
            if not all(isinstance(v, str) for v in values):
                raise _Refusal(MALFORMED_POD, f"{where}.matchExpressions[{e}].values: "
                                              "every value must be a string")  # fmt: skip
            sets.append(set(values))
        _within_selector_bound(walked)
        if not sets:
            return None  # this alternative lets any build through
        alternatives.append(sorted(set.intersection(*sets)))
    return _REQUIRED, alternatives


def _within_selector_bound(walked: int) -> None:
    if walked > MAX_SELECTOR_ITEMS:
        raise _Refusal(
            POD_TOO_LARGE,
            f"{_REQUIRED} has more than {MAX_SELECTOR_ITEMS} terms, expressions and values; a "
            "pod of a wcow RuntimeClass may have at most that many",
        )


def _build_runs(value: str, guest: WindowsBuild) -> bool:
    try:
        host = parse_windows_build(value)
    except ValueError:
        return False
    return value == host.label_value and process_can_run(host, guest)


def _check_process(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> None:
    guest = profile.spec.guest_build
    pinned = _pinned_builds(_spec(pod))
    if guest is None or pinned is None:
        return
    where, alternatives = pinned
    if any(_build_runs(v, guest) for values in alternatives for v in values):
        return
    asked = sorted({v for values in alternatives for v in values})
    listed = ", ".join(shown(v) for v in asked[:8]) + (" ..." if len(asked) > 8 else "")
    raise _Refusal(
        WINDOWS_BUILD_MISMATCH,
        f"{where} pins {WINDOWS_BUILD_LABEL} to {listed or 'no value'}, but "
        f"RuntimeClass {profile.name!r} runs process-isolated containers built for "
        f"{guest.label_value} ({profile.spec.windows_build}), which no such host can run: "
        f"pin {guest.label_value}, drop the pin, or use a Hyper-V RuntimeClass",
    )


# -- sizing a Hyper-V pod ------------------------------------------------------------------------


def _too_large(size: VMSize, vm: VMSpec, own: Mapping[str, int], profile_name: str) -> None:
    needs = size.needs
    assert vm.max_processor_count is not None
    assert vm.max_memory_mb is not None
    if ANNOTATION_PROCESSOR_COUNT not in own and size.processors > vm.max_processor_count:
        raise _Refusal(
            VM_TOO_LARGE,
            f"the pod's CPU limits ({needs.source}; requests where no limit) total "
            f"{needs.cpu_nanos / NANO:g} cores, a utility VM of {size.processors} processors, "
            f"above spec.vm.maxProcessorCount {vm.max_processor_count} of WindowsRuntimeProfile "
            f"{profile_name!r}: lower the CPU limits to at most {vm.max_processor_count}",
        )
    if ANNOTATION_MEMORY_MB not in own and size.memory_mb > vm.max_memory_mb:
        raise _Refusal(
            VM_TOO_LARGE,
            f"the pod's memory limits ({needs.source}; requests where no limit) total "
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
    if needs.source == "pod-level resources":
        return "spec.resources"
    spec = _spec(pod)
    found = []
    for field in ("initContainers", "containers"):
        for i, c in enumerate(_objects(spec, field, "spec")):
            for kind in ("limits", "requests"):
                value = _resources(c, kind, "").get(resource)
                if value is not None:
                    found.append(f"{_name(c, i)} {value}")  # a quantity: parsed already
                    break
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    listed = ", ".join(found[:4]) + more
    return listed if len(listed) <= 200 else f"{listed[:197]}..."  # long names, long quantities


def _check_fits(
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
    raise _Refusal(
        VM_TOO_SMALL,
        f"{found}: lower {' and '.join(advice)}, or use a RuntimeClass with a larger VM "
        "(spec.vm.oversizedPods: Warn on the profile admits such pods with a warning)",
    )


def _set_memory_requests(pod: dict[str, Any], needs: PodNeeds) -> list[str]:
    """Physically backed VMs commit their memory at start: charge the node for it by making
    memory requests equal to limits (raising a request is always valid; QoS is computed
    after mutating admission). The pod was walked already: every shape here is valid, and
    every limit a quantity; a request beside a limit is read only here."""
    spec = _spec(pod)
    holders: list[tuple[str, dict[str, Any]]]
    if needs.source == "pod-level resources":
        holders = [("spec", spec)]
    else:
        containers = _all_containers(spec)
        holders = [
            (f"spec.{field}[{_name(c, i)}]", c)
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
                raise _Refusal(INVALID_QUANTITY, f"{field}: {error}") from None
            if same:
                continue
        holder["resources"].setdefault("requests", {})
        if holder["resources"]["requests"] is None:
            holder["resources"]["requests"] = {}
        holder["resources"]["requests"]["memory"] = limit
        changes.append(f"{where}.resources.requests.memory={limit} (was {request or 'unset'})")
    return changes


def _admit_hyperv(pod: dict[str, Any], profile: WindowsRuntimeProfile) -> Admitted:
    vm = profile.spec.effective_vm()
    assert vm is not None
    where = _host_process(_spec(pod))
    if where is not None:
        raise _Refusal(
            HOST_PROCESS_HYPERV,
            f"{where} is true, but RuntimeClass {profile.name!r} runs pods in a Hyper-V utility "
            "VM, where a HostProcess container (which runs on the host itself) cannot start: "
            "drop runtimeClassName or use a process-isolated RuntimeClass",
        )
    facts = _check_annotations(pod, profile, vm)
    needs = _pod_needs(pod)
    warnings = _check_fits(pod, needs, vm, facts.sizes, profile.name)
    if vm.sizing != "FromPodLimits":  # charged through the overhead (module docstring)
        return Admitted(pod=pod, profile=profile.name, warnings=warnings)
    size = vm_size(needs, vm)
    _too_large(size, vm, facts.sizes, profile.name)
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
        changes += _set_memory_requests(pod, size.needs)
    return Admitted(pod=pod, changes=tuple(changes), profile=profile.name, warnings=warnings)


# -- the decisions -------------------------------------------------------------------------------


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
            _check_annotations(copied, profile, None)
            _check_process(copied, profile)
            _pod_needs(copied)
            return Admitted(pod=copied, profile=profile.name)
        return _admit_hyperv(copied, profile)
    except _Refusal as refusal:
        return Refused(reason=refusal.reason, message=refusal.message, profile=profile.name)


def _placement(pod: Mapping[str, Any]) -> tuple[object, object]:
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    return spec.get("nodeSelector"), spec.get("affinity")


def _check_unchanged(
    old: Mapping[str, Any], new: Mapping[str, Any], profile: WindowsRuntimeProfile
) -> None:
    try:
        before = shim_annotations(old, profile)
    except _Refusal:
        before = {}  # a stored pod of a shape we cannot read: any shim annotation is new
    after = shim_annotations(new, profile)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        listed = ", ".join(shown(k) for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise _Refusal(
            ANNOTATION_CHANGED,
            f"annotation {listed}{more} changed after the pod was created; hcsshim reads "
            "them each time the kubelet creates the pod's sandbox, so they are fixed at "
            "creation: delete the pod and create it again with the new values",
        )


def admit_update(
    old: Mapping[str, Any], new: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]
) -> Decision:
    """A pod UPDATE (the validating webhook cannot change the pod, only refuse).

    The kubelet reads the annotations whenever it creates the pod's sandbox (again after a
    sandbox dies), so every annotation hcsshim would get is fixed once the pod exists: a
    change to one is refused. While the pod is scheduling-gated, Kubernetes lets its
    nodeSelector and affinity change: a change there is judged as at CREATE. Every other
    update (labels, finalizers, owner references, ...) passes, even for a pod the current
    profile would refuse, so no pod is ever stuck."""
    profile = _profile_of(new, profiles)
    if profile is None:
        return Admitted(pod=dict(new))
    try:
        _check_unchanged(old, new, profile)
    except _Refusal as refusal:
        return Refused(reason=refusal.reason, message=refusal.message, profile=profile.name)
    warnings: tuple[AdmissionWarning, ...] = ()
    if _placement(old) != _placement(new):
        decision = admit(new, profiles)
        if isinstance(decision, Refused):
            return decision
        warnings = decision.warnings
    return Admitted(pod=dict(new), profile=profile.name, warnings=warnings)
