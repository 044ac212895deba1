"""Each live profile's RuntimeClass: whether it is ours, the write that makes it match the
spec, and what RuntimeClassReady says about it.

A RuntimeClass is the profile's when it carries a controller reference to it (or, rendered
by ``wcow render`` before the operator ran, no controller at all and our labels naming the
profile); one of the same name that is someone else's is left alone and reported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wcow_operator.reconcile.model import (
    EventNote,
    Observed,
    ObservedProfile,
    Row,
    Write,
    profile_event,
)
from wcow_operator.reconcile.profiles import Profiles, ProfileState
from wcow_operator.render.runtimeclass import (
    MANAGED_BY,
    PROFILE_ANNOTATION,
    PROFILE_LABEL,
    render_runtime_class,
)

APPLIED: Row = ("True", "RuntimeClassApplied", "")


@dataclass(frozen=True)
class RuntimeClassDecision:
    """What one profile's RuntimeClass step decided: RuntimeClassReady, whether the
    RuntimeClass is the profile's own (its status names it), and the writes and events."""

    row: Row
    owned: bool
    writes: tuple[Write, ...] = ()
    events: tuple[EventNote, ...] = ()


def owned_by(runtime_class: Mapping[str, Any], profile: ObservedProfile) -> bool:
    """Ours if it has a controller reference to this profile, or (rendered by `wcow render`
    before the operator ran) no controller at all and our labels naming this profile."""
    metadata = runtime_class.get("metadata", {})
    controllers = [r for r in metadata.get("ownerReferences") or [] if r.get("controller")]
    if controllers:
        return any(r.get("uid") == profile.uid for r in controllers)
    labels = metadata.get("labels") or {}
    named = (metadata.get("annotations") or {}).get(PROFILE_ANNOTATION) or labels.get(PROFILE_LABEL)
    return named == profile.name and labels.get("app.kubernetes.io/managed-by") == MANAGED_BY


def controlled_by(runtime_class: Mapping[str, Any], profile: ObservedProfile) -> bool:
    """Strictly ours: a controller reference to this profile. A RuntimeClass whose reference
    the garbage collector removed (``kubectl delete --cascade=orphan``) is left alone."""
    references = runtime_class.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == profile.uid for r in references)


def runtime_classes(
    profiles: Profiles, observed: Observed, planned: Mapping[str, Row]
) -> dict[str, RuntimeClassDecision]:
    """profile -> its RuntimeClass decision, in the profiles' order. ``planned``: each
    profile's Planned row (a conflict says the same in both conditions)."""
    return {
        state.name: decide_runtime_class(
            state, observed.runtime_classes.get(state.name), planned[state.name], profiles
        )
        for state in profiles.live
    }


def decide_runtime_class(
    state: ProfileState,
    observed_rc: dict[str, Any] | None,
    planned: Row,
    profiles: Profiles,
) -> RuntimeClassDecision:
    profile = state.observed
    ours = observed_rc is not None and owned_by(observed_rc, profile)
    if profiles.conflict(state) is not None:
        return RuntimeClassDecision(("False", "HandlerConflict", planned[2]), ours)
    if state.model is None:
        # An invalid spec leaves the last good RuntimeClass in place.
        if ours:
            kept = "the spec is invalid; the RuntimeClass is left as it was"
            return RuntimeClassDecision(("True", "LastGoodKept", kept), ours)
        return RuntimeClassDecision(
            ("False", "InvalidSpec", "no RuntimeClass until the spec is valid"), ours
        )
    desired = render_runtime_class(state.model)
    if observed_rc is None:
        # No event: the status says RuntimeClassReady (one write per profile fewer when
        # hundreds arrive at once); events are for changes and warnings.
        return RuntimeClassDecision(
            APPLIED, True, (Write("create-runtime-class", profile.name, desired),)
        )
    if not ours:
        conflict = (
            f"a RuntimeClass named {profile.name} exists and is not owned by this profile; "
            "it is left alone. Delete it or rename the profile"
        )
        return RuntimeClassDecision(("False", "RuntimeClassConflict", conflict), False)
    return _owned(profile, desired, observed_rc)


def _owned(
    profile: ObservedProfile, desired: dict[str, Any], observed_rc: dict[str, Any]
) -> RuntimeClassDecision:
    """The profile's own RuntimeClass: recreated when the handler changed (immutable),
    replaced when it drifted or the spec changed, else left alone."""
    merged = _merged_runtime_class(desired, observed_rc)
    if observed_rc.get("handler") != desired["handler"]:
        replaced = profile_event(
            profile,
            "Normal",
            "RuntimeClassReplaced",
            f"handler changed from {observed_rc.get('handler')} to {desired['handler']}: "
            "the RuntimeClass was deleted and created again (handler is immutable); running "
            "pods keep their handler, new pods get the new one",
            after=("recreate-runtime-class", profile.name),
        )
        fresh = json.loads(json.dumps(merged))
        fresh["metadata"].pop("resourceVersion", None)
        write = Write("recreate-runtime-class", profile.name, fresh, observed=observed_rc)
        return RuntimeClassDecision(APPLIED, True, (write,), (replaced,))
    if _differs(merged, observed_rc):
        drift = profile.status.get("observedGeneration") == profile.generation
        reason, verb = (
            ("RuntimeClassRestored", "restored") if drift else ("RuntimeClassUpdated", "updated")
        )
        event = profile_event(
            profile,
            "Normal",
            reason,
            f"{verb} RuntimeClass {profile.name}",
            after=("replace-runtime-class", profile.name),
        )
        write = Write("replace-runtime-class", profile.name, merged, observed=observed_rc)
        return RuntimeClassDecision(APPLIED, True, (write,), (event,))
    return RuntimeClassDecision(APPLIED, True)


def _merged_runtime_class(
    desired: dict[str, Any], observed: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The desired RuntimeClass, keeping labels, annotations and owner references others
    added (ours win on conflict), and the observed resourceVersion for a safe replace."""
    if observed is None:
        return desired
    metadata = observed.get("metadata", {})
    merged: dict[str, Any] = json.loads(json.dumps(desired))
    merged_meta = merged["metadata"]
    merged_meta["labels"] = {**(metadata.get("labels") or {}), **merged_meta["labels"]}
    merged_meta["annotations"] = {
        **(metadata.get("annotations") or {}),
        **merged_meta.get("annotations", {}),
    }
    if metadata.get("finalizers"):
        merged_meta["finalizers"] = list(metadata["finalizers"])
    ours = merged_meta.get("ownerReferences", [])
    others = [
        r
        for r in metadata.get("ownerReferences") or []
        if not any(r.get("uid") == o["uid"] for o in ours)
    ]
    if ours or others:
        merged_meta["ownerReferences"] = [*others, *ours]
    if "resourceVersion" in metadata:
        merged_meta["resourceVersion"] = metadata["resourceVersion"]
    return merged


def _differs(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    def view(body: Mapping[str, Any]) -> dict[str, Any]:
        metadata = body.get("metadata", {})
        return {
            "handler": body.get("handler"),
            "overhead": body.get("overhead"),
            "scheduling": body.get("scheduling"),
            "labels": metadata.get("labels") or {},
            "annotations": metadata.get("annotations") or {},
            "ownerReferences": metadata.get("ownerReferences") or [],
        }

    return view(desired) != view(observed)
