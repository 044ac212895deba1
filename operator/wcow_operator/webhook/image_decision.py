"""Admission by image: pure decisions from image facts already read from the registries.

What a registry says about a reference (``registry.facts``: ``ImageFacts`` or, why it could
not say, ``LookupFailure``) comes in; out comes the pod, with a Hyper-V pod's
images pinned to the manifest of its guest build, or a refusal ``ImageBuildMismatch`` naming
the container, the image, the builds it has and the build it needs. The registry client
(``wcow_operator.registry``) does the reading; nothing here does I/O.

The rules (docs/images.md, whose facts are proved against containerd's own code):

- containerd pulls an index's entry for the *host's* build (``20348 <= build <= host`` from
  WS2022 on, equal builds before: ``process_can_run``), and the manifest a reference names as
  it is, whatever its build (docs/images.md sections 1 and 2);
- a process-isolated pod runs on hosts of its profile's ``windowsBuild`` (the RuntimeClass
  pins them): an image passes when one of its Windows amd64 entries can run there. Its
  reference is kept as written;
- a Hyper-V pod's containers run in a utility VM of the guest build (the node's pause image
  decides it: docs/images.md section 3): an image passes when one of its entries can run on
  a kernel of that build, and the reference is pinned to ``repo@sha256:<that manifest>`` so
  that every containerd line pulls exactly it on any host (section 2), the highest such build
  first as containerd 2.1+ ranks them. What the user wrote is kept in the pod annotation
  ``runtime.wcow.dev/original-images`` (JSON, container -> reference).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from wcow_contract.catalog.windows_builds import WindowsBuild, process_can_run
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.registry.facts import Entry, Facts, ImageFacts, LookupFailure
from wcow_operator.webhook.decision import AdmissionWarning, Admitted, Decision, Refused

ORIGINAL_IMAGES: Final = "runtime.wcow.dev/original-images"
IMAGE_BUILD_MISMATCH: Final = "ImageBuildMismatch"
IMAGE_UNRESOLVED: Final = "ImageUnresolved"
REASONS: Final = (IMAGE_BUILD_MISMATCH, IMAGE_UNRESOLVED)
# The admission warning of an image admitted without its build checked.
IMAGE_UNCHECKED: Final = "ImageUnchecked"
PLATFORM: Final = ("windows", "amd64")  # the only sandbox platform a profile can have
MAX_REFERENCE: Final = 512  # longer references are not looked up (bounded keys and messages)


@dataclass(frozen=True)
class ContainerImage:
    where: str  # spec.containers[app]
    name: str  # the container's name (the annotation's key)
    reference: str


def container_images(pod: Mapping[str, Any]) -> list[ContainerImage]:
    """Init and app containers' images, in the pod's order. The pod has been walked by
    ``admission.admit`` already (shapes and counts bounded); what is odd here is skipped."""
    spec = pod.get("spec")
    found: list[ContainerImage] = []
    if not isinstance(spec, dict):
        return found
    for field in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(field)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if not isinstance(container, dict):
                continue
            name, image = container.get("name"), container.get("image")
            if isinstance(image, str) and image and isinstance(name, str):
                label = name if re.fullmatch(r"[a-z0-9-]{1,63}", name) else str(index)
                found.append(ContainerImage(f"spec.{field}[{label}]", name, image))
    return found


def references(pod: Mapping[str, Any]) -> list[str]:
    """The distinct references to look up (too long ones are refused by the decision)."""
    seen = dict.fromkeys(c.reference for c in container_images(pod))
    return [r for r in seen if len(r) <= MAX_REFERENCE]


@dataclass(frozen=True)
class ImageDecision:
    """What the images of one pod decide: the pinned references by container, warnings for
    images that could not be read, and their causes (for the metric)."""

    pins: dict[str, str]
    warnings: tuple[AdmissionWarning, ...]
    unchecked: tuple[str, ...]


class ImageRefusal(Exception):  # noqa: N818 - returned as a Refused by decide(), never escapes
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _builds(entries: tuple[Entry, ...]) -> str:
    """The Windows amd64 builds an image has, and the other platforms, for messages."""
    windows, other = [], []
    for entry in entries:
        platform = entry.platform
        if platform is None:
            other.append("an entry without platform")
        elif (platform.os, platform.architecture) == PLATFORM:
            windows.append(shown(platform.os_version or "no os.version"))
        else:
            other.append(f"{shown(platform.os)}/{shown(platform.architecture)}")
    parts = sorted(set(windows))[:8]
    said = f"Windows builds {', '.join(parts)}" if parts else "no windows/amd64 entry"
    return said + (f" (also {', '.join(sorted(set(other))[:4])})" if other else "")


def _chosen(facts: ImageFacts, guest: WindowsBuild | None) -> Entry | None:
    """The entry containerd would run for a kernel of build ``guest`` (any build when None):
    the highest compatible build, the first listed among equals."""
    best: tuple[int, Entry] | None = None
    for entry in facts.entries:
        platform = entry.platform
        if platform is None or (platform.os, platform.architecture) != PLATFORM:
            continue
        build = platform.build
        if build is None:
            continue
        if guest is not None and not process_can_run(guest, WindowsBuild(build)):
            continue
        if best is None or build > best[0]:
            best = (build, entry)
    return best[1] if best else None


def _unresolved(image: ContainerImage, failure: LookupFailure, refuse: bool) -> AdmissionWarning:
    if refuse:
        raise ImageRefusal(
            IMAGE_UNRESOLVED,
            f"{image.where}: image {shown(image.reference)} could not be checked: "
            f"{failure.message}; the profile (spec.images.unreachableRegistry: Refuse) or the "
            "operator (--unreachable-registry Refuse) refuses pods whose images cannot be read",
        )
    return AdmissionWarning(
        IMAGE_UNCHECKED,
        f"{image.where}: image {shown(image.reference)} was not checked ({failure.message}); "
        "the pod is admitted without its Windows build checked",
    )


def _mismatch(image: ContainerImage, facts: ImageFacts, profile: WindowsRuntimeProfile) -> str:
    guest = profile.spec.guest_build
    kind = "index" if facts.index else "manifest"
    has = f"image {shown(image.reference)} ({kind}) has {_builds(facts.entries)}"
    if guest is None:
        return (
            f"{image.where}: {has}; RuntimeClass {profile.name!r} runs Windows containers "
            "(windows/amd64): use a Windows image"
        )
    alias = f" ({guest.release})" if guest.release else ""
    if profile.spec.isolation == "HyperV":
        runs = f"in a Hyper-V utility VM of guest build {guest.label_value}{alias}"
    else:
        runs = f"process-isolated on hosts of build {guest.label_value}{alias}"
    floor = "10.0.20348 up to " if guest.number >= 20348 else ""
    return (
        f"{image.where}: {has}; RuntimeClass {profile.name!r} runs it {runs}, which needs an "
        f"image of build {floor}{guest.label_value}: use a tag or index with such an entry"
    )


def decide(
    pod: Mapping[str, Any],
    profile: WindowsRuntimeProfile,
    facts: Mapping[str, Facts],
    refuse_unresolved: bool,
) -> ImageDecision:
    """The pins and warnings for one pod of ``profile``, or ImageRefusal at the first image
    that cannot run under its class (or cannot be read, when ``refuse_unresolved``)."""
    hyperv = profile.spec.isolation == "HyperV"
    guest = profile.spec.guest_build
    pins: dict[str, str] = {}
    warnings: list[AdmissionWarning] = []
    unchecked: list[str] = []
    for image in container_images(pod):
        found = facts.get(image.reference)
        if found is None:
            found = LookupFailure("Malformed", f"a reference longer than {MAX_REFERENCE} bytes")
        if isinstance(found, LookupFailure):
            warnings.append(_unresolved(image, found, refuse_unresolved))
            unchecked.append(found.cause)
            continue
        entry = _chosen(found, guest)
        if entry is None:
            if any(e.platform is None for e in found.entries):
                failure = LookupFailure(
                    "Malformed",
                    "its index lists entries without a platform, which this check does not read",
                )
                warnings.append(_unresolved(image, failure, refuse_unresolved))
                unchecked.append(failure.cause)
                continue
            raise ImageRefusal(IMAGE_BUILD_MISMATCH, _mismatch(image, found, profile))
        pinned = f"{found.repository}@{entry.digest}"
        if hyperv and image.reference != pinned:
            pins[image.name] = pinned
    return ImageDecision(pins=pins, warnings=tuple(warnings), unchecked=tuple(unchecked))


def _pin(pod: dict[str, Any], pins: Mapping[str, str]) -> list[str]:
    """Write the pinned references into the pod (a copy the caller owns) and the annotation;
    what was changed, for the log."""
    spec = pod["spec"]
    original: dict[str, str] = {}
    changes: list[str] = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            name = container.get("name") if isinstance(container, dict) else None
            if isinstance(name, str) and name in pins and name not in original:
                original[name] = container["image"]
                container["image"] = pins[name]
                changes.append(f"spec.{field}[{name}].image={pins[name]}")
    metadata = pod.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        annotations = metadata["annotations"] = {}
    try:
        kept = json.loads(annotations.get(ORIGINAL_IMAGES, "{}"))
    except (TypeError, ValueError, RecursionError):  # a tenant's annotation: any shape
        kept = {}
    if not isinstance(kept, dict):
        kept = {}
    merged = {**{k: v for k, v in kept.items() if isinstance(v, str)}, **original}
    annotations[ORIGINAL_IMAGES] = json.dumps(merged, sort_keys=True, separators=(",", ":"))
    changes.append(f"metadata.annotations[{ORIGINAL_IMAGES}]")
    return changes


def with_images(
    decision: Decision,
    profile: WindowsRuntimeProfile | None,
    facts: Mapping[str, Facts],
    refuse_unresolved: bool,
) -> tuple[Decision, tuple[str, ...]]:
    """The sizing decision completed by the images' one, and the causes of images left
    unchecked (for the metric). A refusal stays the refusal; a pod of no wcow class passes."""
    if not isinstance(decision, Admitted) or profile is None:
        return decision, ()
    try:
        images = decide(decision.pod, profile, facts, refuse_unresolved)
    except ImageRefusal as refusal:
        return Refused(refusal.reason, refusal.message, profile.name), ()
    changes = list(decision.changes)
    pod = decision.pod
    if images.pins:
        changes += _pin(pod, images.pins)  # admit() returned a copy of its own
    admitted = Admitted(
        pod=pod,
        changes=tuple(changes),
        profile=decision.profile,
        warnings=decision.warnings + images.warnings,
    )
    return admitted, images.unchecked


def changed_images(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Containers (by name) whose image an UPDATE changes (Kubernetes lets it change)."""
    before = {c.name: c.reference for c in container_images(old)}
    return [c.name for c in container_images(new) if before.get(c.name) != c.reference]


def only_containers(pod: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """A shallow copy of ``pod`` with only the named init and app containers."""
    spec = dict(pod.get("spec") or {})
    for field in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(field)
        if isinstance(items, list):
            spec[field] = [c for c in items if isinstance(c, dict) and c.get("name") in names]
    return {**pod, "spec": spec}


def with_updated_images(
    decision: Decision,
    profile: WindowsRuntimeProfile | None,
    changed: Mapping[str, Any],
    facts: Mapping[str, Facts],
    refuse_unresolved: bool,
) -> tuple[Decision, tuple[str, ...]]:
    """An UPDATE that changes images (``changed``: the new pod with only those containers):
    judged as at creation, and since the validating webhook cannot pin, a Hyper-V pod's new
    image must already be the guest build's manifest; the refusal names that reference."""
    if not isinstance(decision, Admitted) or profile is None:
        return decision, ()
    try:
        images = decide(changed, profile, facts, refuse_unresolved)
    except ImageRefusal as refusal:
        return Refused(refusal.reason, refusal.message, profile.name), ()
    if images.pins:
        wanted = "; ".join(
            f"{name}: {shown(ref, 200)}" for name, ref in sorted(images.pins.items())
        )
        message = (
            f"an image changed after the pod was created would be pulled for the node's build, "
            f"not the guest build of RuntimeClass {profile.name!r}; admission pins images only "
            f"at creation: write the guest build's manifest ({wanted}), or recreate the pod"
        )
        return Refused(IMAGE_BUILD_MISMATCH, message, profile.name), ()
    warnings = decision.warnings + images.warnings
    return Admitted(decision.pod, decision.changes, decision.profile, warnings), images.unchecked
