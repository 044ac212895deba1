"""The pod annotations hcsshim reads (``wcow_contract.catalog.hcs_annotations``), checked on every
wcow pod whose handler lets them through (containerd's pod_annotations allow-list, matched as
Go's path.Match does): bounded ones against the profile, opt-in ones refused unless the
profile lists the exact key in ``spec.annotations.pod``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from wcow_contract.catalog import hcs_annotations as hcs
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import VMSpec, WindowsRuntimeProfile
from wcow_operator.webhook.decision import (
    ANNOTATION_INVALID,
    ANNOTATION_NOT_ALLOWED,
    ANNOTATION_OUT_OF_BOUNDS,
    Refusal,
)
from wcow_operator.webhook.pod_shape import pod_annotations
from wcow_operator.webhook.sizing import even_mb


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


_GO_BOOLS: Final = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                    "0": False, "f": False, "F": False, "FALSE": False, "false": False,
                    "False": False}  # fmt: skip  # strconv.ParseBool


def shim_annotations(pod: Mapping[str, Any], profile: WindowsRuntimeProfile) -> dict[str, Any]:
    """The pod's annotations that reach hcsshim: under its prefixes and let through by the
    handler's pod_annotations (containerd drops the rest)."""
    patterns = profile.spec.pod_annotation_patterns()
    return {
        key: value
        for key, value in pod_annotations(pod).items()
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
        raise Refusal(
            ANNOTATION_INVALID,
            f"annotation {key}={shown(value)} is not a {kind}: hcsshim would ignore it and "
            "use the profile's setting; write a number such as 4",
        )
    return int(value)


def _boolean(key: str, value: str) -> bool:
    if value not in _GO_BOOLS:
        raise Refusal(
            ANNOTATION_INVALID,
            f"annotation {key}={shown(value)} is not true or false: hcsshim would ignore it",
        )
    return _GO_BOOLS[value]


@dataclass(frozen=True)
class AnnotationFacts:
    """What a pod's own annotations decide: its VM size where it sets one, and whether
    its VM commits all its memory at start."""

    sizes: dict[str, int]
    physically_backed: bool


def check_annotations(
    pod: Mapping[str, Any], profile: WindowsRuntimeProfile, vm: VMSpec | None
) -> AnnotationFacts:
    """Each annotation that reaches hcsshim, judged by the catalogue; Refusal at the
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
            raise Refusal(
                ANNOTATION_NOT_ALLOWED,
                f"annotation {shown(key)} ({entry.why}) may be set by a pod only where "
                f"WindowsRuntimeProfile {profile.name!r} lists that exact key in "
                "spec.annotations.pod (a wildcard does not count): remove it from the pod",
            )
        if not isinstance(raw, str):
            raise Refusal(ANNOTATION_INVALID, f"annotation {key} is {shown(raw)}, not a string")
        if entry.kind == "bool":
            flag = _boolean(key, raw)
            if key == hcs.HOST_PROCESS and flag:
                raise Refusal(
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
    return AnnotationFacts(sizes=sizes, physically_backed=backed)


def _check_backed(
    key: str, raw: str, profile: WindowsRuntimeProfile, vm: VMSpec, listed: set[str]
) -> None:
    """A VM that commits its memory must be charged to the node: FromPodLimits raises the
    pod's memory requests to its limits (as for a profile that backs memory); a Fixed VM is
    charged only through the RuntimeClass overhead, which covers it only where the profile
    backs memory itself (WholeVM by default)."""
    if vm.sizing == "FromPodLimits" or vm.fully_physically_backed or key in listed:
        return
    raise Refusal(
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
        raise Refusal(
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
    raise Refusal(
        ANNOTATION_OUT_OF_BOUNDS,
        f"annotation {key}={value}{rounded} asks for more than {where} "
        f"of WindowsRuntimeProfile {profile.name!r}: {advice}",
    )


def _is_set(profile: WindowsRuntimeProfile, field: str) -> bool:
    vm = profile.spec.vm
    attribute = "processor_count" if field == "processorCount" else "memory_mb"
    return vm is not None and getattr(vm, attribute) is not None
