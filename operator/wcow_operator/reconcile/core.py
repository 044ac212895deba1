"""The one reconcile: observed cluster + profiles -> the writes that make them match.

Pure: no API calls, no clock (``now`` is passed in). Called for every event and on a timer;
with nothing changed it returns no writes and no events.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Literal

from pydantic import ValidationError

from wcow_contract.conditions import (
    NODES_READY,
    PLANNED,
    READY,
    RECONCILING,
    ROLLED_OUT,
    RUNTIME_CLASS_READY,
    STALLED,
    VALID,
    find_condition,
    set_condition,
)
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import (
    Condition,
    ConditionStatus,
    Drain,
    NodeCounts,
    RolloutStatus,
    WindowsRuntimeProfile,
    WindowsRuntimeProfileStatus,
)
from wcow_contract.wire.canonical import canonical_json
from wcow_contract.wire.plan import PLAN_KEY, Plan, PlanEntry, plan_entry, plan_with_text
from wcow_contract.wire.plan_check import EntryRefusedError, checked_entry
from wcow_contract.wire.rollout import (
    RESUME_ANNOTATION,
    ROLLOUT_CONFIGMAP,
    ROLLOUT_KEY,
    Hold,
    Rollout,
    parse_rollout,
)
from wcow_operator.reconcile.drain import (
    DrainOrder,
    DrainWork,
    ProfileDrain,
    drain_order,
    to_uncordon,
)
from wcow_operator.reconcile.health import reconciling_and_stalled
from wcow_operator.reconcile.holds import (
    ROLLED_OUT_KEY,
    Claim,
    Record,
    dump_record,
    hold_back,
    kept_entry,
    next_record,
    read_record,
    standing,
)
from wcow_operator.reconcile.model import (
    FINALIZER,
    EventNote,
    Observed,
    ObservedProfile,
    Outcome,
    Write,
)
from wcow_operator.reconcile.nodes import HandlerNeeds, NodeSummary, NodeTally, describe
from wcow_operator.reconcile.rollout import (
    NodeReport,
    Progress,
    decide,
    node_state,
    parse_max_unavailable,
)
from wcow_operator.render.configmaps import plan_config_map, rollout_config_map
from wcow_operator.render.runtimeclass import (
    MANAGED_BY,
    PROFILE_ANNOTATION,
    PROFILE_LABEL,
    render_runtime_class,
)

RolloutPhase = Literal["Progressing", "Complete", "Halted"]
CONFIGMAP_LIMIT = 1024 * 1024


@dataclass(frozen=True)
class ReconcileSettings:
    namespace: str
    require_node_gating: bool = False
    max_unavailable: int | str = "10%"  # the default of profiles that do not set it
    rollout_timeout: timedelta = timedelta(seconds=900)
    drain: Drain = "None"  # the default of profiles that do not set spec.rollout.drain
    plan_warn_bytes: int = CONFIGMAP_LIMIT // 2
    plan_max_bytes: int = CONFIGMAP_LIMIT * 9 // 10


@dataclass
class _Profile:
    """Working state of one live profile during a pass."""

    observed: ObservedProfile
    model: WindowsRuntimeProfile | None = None
    problems: list[str] = field(default_factory=list)
    last_good: tuple[str, PlanEntry] | None = None  # (handler, plan entry)
    planned: tuple[ConditionStatus, str, str] = ("Unknown", "Pending", "")
    runtime_class: tuple[ConditionStatus, str, str] = ("Unknown", "Pending", "")
    owns_runtime_class: bool = False
    # Held back, and the (handler, entry) the plan keeps instead (None: none).
    hold: tuple[Hold, tuple[str, PlanEntry] | None] | None = None

    @property
    def name(self) -> str:
        return self.observed.name

    @property
    def claimed_handler(self) -> str | None:
        if self.model is not None:
            return self.model.handler
        return self.last_good[0] if self.last_good else None

    @cached_property
    def current_status(self) -> WindowsRuntimeProfileStatus | None:
        """The status the profile carries, read once a pass (None: unreadable)."""
        try:
            return WindowsRuntimeProfileStatus.model_validate(self.observed.status)
        except ValidationError:
            return None


@dataclass
class Memo:
    """What earlier passes worked out per profile, kept by the controller from pass to pass,
    so that a pass over hundreds of profiles works out again only those that changed. Never
    more than a shortcut: ``reconcile`` returns the same with it as without it.

    ``parsed``: name -> (what the spec's parse reads, the parsed state). ``statuses``:
    name -> (everything a status is computed from but the status itself, the status); used
    only while the profile still carries exactly that status, so the pass that computed it
    found nothing to change (a condition's time changes only when it transitions)."""

    parsed: dict[str, tuple[Any, _Profile]] = field(default_factory=dict)
    statuses: dict[str, tuple[Any, dict[str, Any]]] = field(default_factory=dict)
    # name -> (the parsed spec, its plan entry): the entry of the same model object, which
    # ``parsed`` hands out again while the spec is unchanged.
    entries: dict[str, tuple[WindowsRuntimeProfile, PlanEntry]] = field(default_factory=dict)

    def entry(self, state: _Profile, earlier: Memo) -> PlanEntry:
        """``plan_entry`` of the profile's spec, or the one an earlier pass made of it."""
        assert state.model is not None
        known = earlier.entries.get(state.name)
        entry = known[1] if known is not None and known[0] is state.model else None
        if entry is None:
            entry = plan_entry(state.model)
        self.entries[state.name] = (state.model, entry)
        return entry


def _parse_inputs(observed: ObservedProfile, settings: ReconcileSettings) -> Any:
    """All that ``_parse`` reads: the document but its status and the metadata that
    ``ObjectMeta`` ignores (resourceVersion changes with every status write)."""
    metadata = observed.metadata
    return (
        settings.require_node_gating,
        {k: v for k, v in observed.body.items() if k not in ("status", "metadata")},
        {k: metadata.get(k) for k in ("name", "generation", "uid", "labels", "annotations")},
    )


def _parsed(
    observed: ObservedProfile, settings: ReconcileSettings, earlier: Memo, memo: Memo
) -> _Profile:
    """``_parse``, or a fresh copy of what it gave for the same input in an earlier pass."""
    inputs = _parse_inputs(observed, settings)
    known = earlier.parsed.get(observed.name)
    if known is not None and known[0] == inputs:
        state = _Profile(observed, model=known[1].model, problems=list(known[1].problems))
    else:
        state = _parse(observed, settings)
    memo.parsed[observed.name] = (inputs, _Profile(observed, state.model, list(state.problems)))
    return state


def _parse(observed: ObservedProfile, settings: ReconcileSettings) -> _Profile:
    state = _Profile(observed)
    try:
        # The status is ours to write; whatever it holds must not make the spec invalid.
        state.model = parse_profile({k: v for k, v in observed.body.items() if k != "status"})
    except ProfileInvalidError as invalid:
        state.problems = [str(problem) for problem in invalid.problems]
        return state
    if settings.require_node_gating and not state.model.spec.scheduling.require_ready_label:
        state.problems = [
            "spec.scheduling.requireReadyLabel: must be true: this cluster's operator runs "
            "with --require-node-gating (got False)"
        ]
        state.model = None
    return state


def _last_good(plan: Mapping[str, Any] | None) -> dict[str, tuple[str, dict[str, Any]]]:
    """profile name -> (handler, entry) of what the current plan holds for it."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for handler, entry in ((plan or {}).get("handlers") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("profile"), str):
            found[entry["profile"]] = (handler, entry)
    return found


def _trusted_last_good(
    found: tuple[str, dict[str, Any]] | None, profile: ObservedProfile
) -> tuple[str, PlanEntry] | None:
    """The plan's entry for an invalid profile, if the operator may write it again: it names
    this profile's uid and is exactly what the renderer makes of the spec it carries. Whoever
    can write the plan ConfigMap could otherwise plant an entry that the operator would keep
    re-emitting for as long as the profile stays invalid. An entry without a spec (written by
    an operator before entries carried one) is kept: agents refuse the plan while it is in
    it, so nodes hold still until the profile is fixed, instead of losing the handler (if
    it has the shape such an operator wrote: the typed entry without its spec)."""
    if found is None:
        return None
    handler, entry = found
    if entry.get("uid") != profile.uid:
        return None
    try:
        if "spec" not in entry:
            return handler, PlanEntry.model_validate(entry)
        return handler, checked_entry(handler, entry)
    except (ValidationError, EntryRefusedError):
        return None


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


def _runtime_class_writes(
    state: _Profile, observed_rc: dict[str, Any] | None, events: list[EventNote]
) -> list[Write]:
    profile = state.observed
    assert state.model is not None
    desired = render_runtime_class(state.model)
    if observed_rc is None:
        # No event: the status says RuntimeClassReady (one write per profile fewer when
        # hundreds arrive at once); events are for changes and warnings.
        state.runtime_class = ("True", "RuntimeClassApplied", "")
        state.owns_runtime_class = True
        return [Write("create-runtime-class", profile.name, desired)]
    if not owned_by(observed_rc, profile):
        state.runtime_class = (
            "False",
            "RuntimeClassConflict",
            f"a RuntimeClass named {profile.name} exists and is not owned by this profile; "
            "it is left alone. Delete it or rename the profile",
        )
        return []
    state.runtime_class = ("True", "RuntimeClassApplied", "")
    state.owns_runtime_class = True
    return _owned_runtime_class_writes(profile, desired, observed_rc, events)


def _owned_runtime_class_writes(
    profile: ObservedProfile,
    desired: dict[str, Any],
    observed_rc: dict[str, Any],
    events: list[EventNote],
) -> list[Write]:
    """The profile's own RuntimeClass: recreated when the handler changed (immutable),
    replaced when it drifted or the spec changed, else left alone."""
    merged = _merged_runtime_class(desired, observed_rc)
    if observed_rc.get("handler") != desired["handler"]:
        events.append(
            _event(
                profile,
                "Normal",
                "RuntimeClassReplaced",
                f"handler changed from {observed_rc.get('handler')} to {desired['handler']}: "
                "the RuntimeClass was deleted and created again (handler is immutable); running "
                "pods keep their handler, new pods get the new one",
                after=("recreate-runtime-class", profile.name),
            )
        )
        fresh = json.loads(json.dumps(merged))
        fresh["metadata"].pop("resourceVersion", None)
        return [Write("recreate-runtime-class", profile.name, fresh, observed=observed_rc)]
    if _differs(merged, observed_rc):
        drift = profile.status.get("observedGeneration") == profile.generation
        reason, verb = (
            ("RuntimeClassRestored", "restored") if drift else ("RuntimeClassUpdated", "updated")
        )
        events.append(
            _event(
                profile,
                "Normal",
                reason,
                f"{verb} RuntimeClass {profile.name}",
                after=("replace-runtime-class", profile.name),
            )
        )
        return [Write("replace-runtime-class", profile.name, merged, observed=observed_rc)]
    return []


def _event(
    profile: ObservedProfile,
    type_: str,
    reason: str,
    message: str,
    after: tuple[str, str] | None = None,
) -> EventNote:
    return EventNote(
        profile.name,
        profile.uid,
        "Warning" if type_ == "Warning" else "Normal",
        reason,
        message,
        after,
    )


def _plan_entries(
    live: list[_Profile],
    conflicts: dict[str, list[str]],
    entry_of: Callable[[_Profile], PlanEntry],
) -> dict[str, PlanEntry]:
    entries: dict[str, PlanEntry] = {}
    claimed = {h for state in live if (h := state.claimed_handler) is not None}
    for state in live:
        handler = state.claimed_handler
        if handler is None:
            state.planned = ("False", "InvalidSpec", "not in the plan until the spec is valid")
            continue
        if handler in conflicts:
            others = [n for n in conflicts[handler] if n != state.name]
            state.planned = (
                "False",
                "HandlerConflict",
                f"handler {handler!r} is also claimed by {', '.join(others)}; none of them is "
                "in the plan until only one claims it",
            )
            continue
        if state.hold is not None:
            _held_entry(state, entries, claimed)
        elif state.model is not None:
            entries[handler] = entry_of(state)
            state.planned = ("True", "InPlan", f"handler {handler} is in the plan")
        elif state.last_good is not None:
            entries[handler] = state.last_good[1]
            generation = state.last_good[1].generation
            state.planned = (
                "True",
                "LastGoodKept",
                f"the spec is invalid; the last valid version (generation {generation}) "
                "stays in the plan",
            )
    return entries


def _held_entry(state: _Profile, entries: dict[str, PlanEntry], claimed: set[str]) -> None:
    """A held-back profile's place in the plan: its last rolled-out entry, or none."""
    assert state.hold is not None
    hold, kept = state.hold
    held = f"generation {hold.generation} failed on nodes and is held back"
    if kept is None or (kept[0] != hold.handler and kept[0] in claimed):
        state.planned = (
            "False",
            "HeldBack",
            f"{held}; it never rolled out, so it is out of the plan until the spec changes "
            "or the rollout is resumed",
        )
        return
    handler, entry = kept
    entries[handler] = entry
    state.planned = (
        "True",
        "HeldBack",
        f"{held}; the plan keeps generation {entry.generation} (handler {handler}), its last "
        "rolled-out version",
    )


def _fit_plan(
    entries: dict[str, PlanEntry],
    observed_plan: Mapping[str, Any] | None,
    live: list[_Profile],
    settings: ReconcileSettings,
) -> tuple[Plan, dict[str, Any], str]:
    """The plan to write, its view and its canonical JSON (each worked out once: at 500
    handlers the JSON is 273 KB). Over the size limit, entries the nodes already have stay,
    then new and changed ones are added by handler name while they fit; the rest wait and
    their profiles say why. (Never an emptier plan than needed: agents remove what leaves
    it.)"""
    plan, view, text = plan_with_text(entries)
    size = len(text.encode("utf-8"))
    if size <= settings.plan_max_bytes:
        return plan, view, text
    previous = (observed_plan or {}).get("handlers") or {}
    kept = {h: e for h, e in entries.items() if previous.get(h) == e.view()}
    room = settings.plan_max_bytes - len(plan_with_text(kept)[2].encode("utf-8"))
    for handler in sorted(set(entries) - set(kept)):
        # '"h":{...}' and a comma
        cost = len(canonical_json({handler: entries[handler].view()})) - 1
        if cost <= room:
            kept[handler] = entries[handler]
            room -= cost
    message = (
        f"the plan would be {size} bytes, over the {settings.plan_max_bytes}-byte limit "
        "(a ConfigMap holds 1 MiB); this profile waits. Remove unused profiles"
    )
    for state in live:
        claimed = state.claimed_handler
        if claimed in entries and claimed not in kept:
            state.planned = ("False", "PlanTooLarge", message)
    return plan_with_text(kept)


def _nodes_condition(
    nodes: NodeSummary, selector: Mapping[str, str] | None = None
) -> tuple[ConditionStatus, str, str]:
    message = describe(nodes)
    if nodes.eligible == 0:
        if selector:
            pairs = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
            message += (
                f"; only nodes labelled {pairs} (spec.scheduling.nodeSelector) apply it, "
                "and none of them can run it"
            )[:512]
        return "False", "NoEligibleNodes", message
    if nodes.ready == nodes.eligible:
        return "True", "AllEligibleNodesReady", message
    if nodes.failed:
        return "False", "NodesFailed", message
    return "False", "NodesPending", message


def _conditions(
    state: _Profile,
    nodes: NodeSummary,
    now: datetime,
    rollout: tuple[ConditionStatus, str, str] | None,
) -> list[Condition]:
    current = state.current_status.conditions if state.current_status is not None else []
    generation = state.observed.generation
    if state.model is not None:
        valid: tuple[ConditionStatus, str, str] = ("True", "SpecValid", "")
    else:
        valid = ("False", "InvalidSpec", "; ".join(state.problems))
    if state.model is None and state.runtime_class[1] == "Pending":
        state.runtime_class = (
            ("True", "LastGoodKept", "the spec is invalid; the RuntimeClass is left as it was")
            if state.owns_runtime_class
            else ("False", "InvalidSpec", "no RuntimeClass until the spec is valid")
        )
    rows = [
        (VALID, valid),
        (PLANNED, state.planned),
        (RUNTIME_CLASS_READY, state.runtime_class),
        (NODES_READY, _nodes_condition(nodes, _selector(state))),
    ]
    # Ungated profiles send pods to nodes regardless of agents, so nodes do not gate Ready.
    gated = state.model.spec.scheduling.require_ready_label if state.model else True
    blocking = [
        (type_, reason)
        for type_, (status, reason, _) in rows
        if status != "True" and (type_ != NODES_READY or gated)
    ]
    if blocking:
        type_, reason = blocking[0]
        ready: tuple[ConditionStatus, str, str] = ("False", reason, f"{type_} is not True")
    else:
        ready = ("True", "Ready", "the RuntimeClass is applied and its handler is ready")
    rows.append((READY, ready))
    # The rollout never gates Ready: nodes not yet changed stay ready on the last plan.
    rows.append(
        (
            ROLLED_OUT,
            rollout or ("True", "NoChangePending", "no change of this handler is rolling out"),
        )
    )
    reconciling, stalled = reconciling_and_stalled(rows, nodes_gate=gated)
    rows += [(RECONCILING, reconciling), (STALLED, stalled)]
    return _set_rows(current, rows, generation, now)


def _selector(state: _Profile) -> Mapping[str, str] | None:
    return state.model.spec.scheduling.node_selector if state.model is not None else None


def _set_rows(
    current: list[Condition],
    rows: list[tuple[str, tuple[ConditionStatus, str, str]]],
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """``current`` with every row set, in the rows' order (others after them)."""
    conditions = list(current)
    for type_, (status, reason, message) in rows:
        conditions = set_condition(
            conditions,
            type_,
            status=status,
            reason=reason,
            message=message,
            observed_generation=generation,
            now=now,
        )
    order = [row[0] for row in rows]
    return sorted(conditions, key=lambda c: order.index(c.type) if c.type in order else 99)


def _status(
    state: _Profile, nodes: NodeSummary, now: datetime, progress: Progress | None
) -> WindowsRuntimeProfileStatus:
    rollout, row = _rollout_status(state, progress)
    return WindowsRuntimeProfileStatus(
        observed_generation=state.observed.generation,
        conditions=_conditions(state, nodes, now, row),
        rollout=rollout,
        handler=state.claimed_handler,
        runtime_class_name=state.name if state.owns_runtime_class else None,
        nodes=NodeCounts(eligible=nodes.eligible, ready=nodes.ready, failed=nodes.failed),
        failures=nodes.failures,
    )


def runtime_class_failed(
    status: Mapping[str, Any], error: Exception, now: datetime
) -> dict[str, Any]:
    """``status`` with RuntimeClassReady (and Ready) False because writing the RuntimeClass
    failed with ``error``."""
    model = WindowsRuntimeProfileStatus.model_validate(status)
    message = f"writing the RuntimeClass failed: {error}"[:1024]
    conditions = model.conditions
    rows: list[tuple[str, ConditionStatus, str, str]] = [
        (RUNTIME_CLASS_READY, "False", "RuntimeClassWriteFailed", message),
        (READY, "False", "RuntimeClassWriteFailed", message),
    ]
    stalled = find_condition(conditions, STALLED)
    if stalled is None or stalled.status != "True":
        # The next pass tries again: under way, unless something else needs a person.
        rows.append((RECONCILING, "True", "RuntimeClassWriteFailed", message))
        rows.append((STALLED, "False", "Progressing", "see Reconciling"))
    for type_, condition_status, reason, text in rows:
        conditions = set_condition(
            conditions,
            type_,
            status=condition_status,
            reason=reason,
            message=text,
            observed_generation=model.observed_generation,
            now=now,
        )
    updated = model.model_copy(update={"conditions": conditions, "runtime_class_name": None})
    return updated.model_dump(by_alias=True, exclude_none=True, mode="json")


def normalized_status(status: Mapping[str, Any]) -> dict[str, Any]:
    return _normalized(status)


def _normalized(status: Mapping[str, Any]) -> dict[str, Any]:
    try:
        model = WindowsRuntimeProfileStatus.model_validate(status)
    except ValidationError:
        return {"unreadable": True}
    return _dumped(model)


def _dumped(model: WindowsRuntimeProfileStatus | None) -> dict[str, Any]:
    """A status as written (and compared): camelCase, no empty fields."""
    if model is None:
        return {"unreadable": True}
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _transition_events(
    state: _Profile, before: list[Condition], after: list[Condition]
) -> list[EventNote]:
    events = []
    profile = state.observed
    old, new = find_condition(before, ROLLED_OUT), find_condition(after, ROLLED_OUT)
    if new is not None and (old is None or old.reason != new.reason):
        if new.reason == "RolloutHalted":
            events.append(_event(profile, "Warning", new.reason, new.message))
        elif new.reason == "RolloutComplete" and old is not None:
            events.append(_event(profile, "Normal", new.reason, new.message))
    for type_ in (VALID, PLANNED, RUNTIME_CLASS_READY):
        old, new = find_condition(before, type_), find_condition(after, type_)
        if new is None or (
            old is not None
            and (old.status, old.reason, old.message) == (new.status, new.reason, new.message)
        ):
            continue
        if new.status == "False" and new.reason != "Pending":
            events.append(_event(profile, "Warning", new.reason, new.message or new.reason))
        elif type_ == VALID and old is not None and old.status == "False":
            events.append(_event(profile, "Normal", "SpecValid", "the spec is valid again"))
    return events


def _live_writes(
    live: list[_Profile],
    conflicts: Mapping[str, list[str]],
    observed: Observed,
    events: list[EventNote],
) -> list[Write]:
    writes: list[Write] = []
    for state in live:
        profile = state.observed
        observed_rc = observed.runtime_classes.get(profile.name)
        ours = observed_rc is not None and owned_by(observed_rc, profile)
        if state.claimed_handler in conflicts:
            state.runtime_class = ("False", "HandlerConflict", state.planned[2])
            state.owns_runtime_class = ours
        elif state.model is not None:
            writes += _runtime_class_writes(state, observed_rc, events)
        else:
            state.owns_runtime_class = ours
    return writes


def _plan_writes(
    plan: Plan, text: str, observed: Observed, namespace: str, record: Record
) -> list[Write]:
    """The plan ConfigMap's write when the plan changed, with the record of what its
    rollout's handlers had before (``reconcile.holds``), which is written only with it.
    ``text``: the plan's canonical JSON, as its ConfigMap holds it (worked out once a pass:
    at 500 handlers it is 273 KB)."""
    config_map = plan_config_map(plan, namespace, paced=True, text=text)
    if record:
        config_map["data"][ROLLED_OUT_KEY] = dump_record(record)
    current = observed.plan_config_map or {}
    same_data = (current.get("data") or {}).get(PLAN_KEY) == text
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    wanted = config_map["metadata"]["annotations"]
    if same_data and all(annotations.get(k) == v for k, v in wanted.items()):
        return []
    name = config_map["metadata"]["name"]
    return [Write("write-plan", name, config_map, observed=observed.plan_config_map)]


def _decide_rollout(
    plan: dict[str, Any],
    observed: Observed,
    live: list[_Profile],
    settings: ReconcileSettings,
    now: datetime,
    *,
    current: Rollout | None,
    held: Mapping[str, Hold],
    carry: Mapping[str, str] | None = None,
) -> tuple[Rollout, Progress, DrainWork]:
    """Who may change to ``plan`` now (see ``reconcile.rollout``), and the drainer's work."""
    reports = _reports(observed)
    limits = {
        state.claimed_handler: state.model.spec.rollout.max_unavailable
        for state in live
        if state.model is not None
        and state.claimed_handler is not None
        and state.model.spec.rollout.max_unavailable is not None
    }
    resume = sorted(
        f"{state.name}={value}"
        for state in live
        if (value := (state.observed.metadata.get("annotations") or {}).get(RESUME_ANNOTATION))
    )
    rollout, progress = decide(
        plan=plan,
        previous_plan=observed.plan,
        current=current,
        reports=reports,
        max_unavailable=lambda changed: min(
            (
                parse_max_unavailable(limits.get(h, settings.max_unavailable), len(reports))
                for h in changed
            ),
            default=parse_max_unavailable(settings.max_unavailable, len(reports)),
        ),
        resume_key=";".join(resume),
        now=now,
        timeout=settings.rollout_timeout,
        drain=lambda changed: _drain_order(live, changed, settings.drain),
        drains=observed.drains,
        held=held,
        carry=carry,
    )
    work = _drain_work(
        rollout, observed, plan, _drain_order(live, progress.changed, settings.drain)
    )
    return rollout, progress, work


def _reports(observed: Observed) -> Mapping[str, NodeReport]:
    reports = observed.reports
    return NodeTally.reports(observed.nodes) if reports is None else reports


def _observed_rollout(observed: Observed) -> Rollout | None:
    return parse_rollout(((observed.rollout_config_map or {}).get("data") or {}).get(ROLLOUT_KEY))


def _rollout_writes(rollout: Rollout, observed: Observed, namespace: str) -> list[Write]:
    """The rollout ConfigMap's write, if the decision differs from it."""
    if rollout == _observed_rollout(observed):
        return []
    body = rollout_config_map(rollout, namespace)
    config_map = observed.rollout_config_map
    return [Write("write-rollout", ROLLOUT_CONFIGMAP, body, observed=config_map, after_plan=True)]


@dataclass
class _Planned:
    """The plan and its rollout as one pass decides them (``_plan_and_rollout``)."""

    plan: Plan
    view: dict[str, Any]  # the plan's view and canonical JSON, each worked out once
    text: str
    rollout: Rollout
    progress: Progress
    drain: DrainWork
    record: Record


def _claims(live: list[_Profile], conflicts: Mapping[str, list[str]]) -> dict[str, Claim]:
    """profile -> its claim, for the profiles whose handler is theirs alone."""
    return {
        state.name: Claim(
            handler=handler,
            uid=state.observed.uid,
            generation=state.observed.generation,
            resume=(state.observed.metadata.get("annotations") or {}).get(RESUME_ANNOTATION),
        )
        for state in live
        if (handler := state.claimed_handler) is not None and handler not in conflicts
    }


def _mark_holds(live: list[_Profile], held: Mapping[str, Hold]) -> None:
    """Which profiles are held back, with the entry the plan keeps for each (checked when
    the hold was read or made: ``holds.standing``, ``holds.hold_back``)."""
    for state in live:
        hold = held.get(state.name)
        state.hold = None if hold is None else (hold, kept_entry(state.name, hold))


def _plan_and_rollout(
    live: list[_Profile],
    conflicts: dict[str, list[str]],
    observed: Observed,
    settings: ReconcileSettings,
    now: datetime,
    *,
    entry_of: Callable[[_Profile], PlanEntry],
) -> _Planned:
    """The plan with the held-back profiles' last rolled-out entries, and its rollout. When
    this pass finds the rollout halted by handlers' failures, those handlers are held back
    too: the plan is made again without their change, a new rollout (``reconcile.holds``)."""
    claims = _claims(live, conflicts)
    current = _observed_rollout(observed)
    held = standing(current.held if current else {}, claims)

    def one_round(
        last: Rollout | None, carry: Mapping[str, str] | None = None
    ) -> tuple[tuple[Plan, dict[str, Any], str], Rollout, Progress, DrainWork]:
        _mark_holds(live, held)
        fitted = _fit_plan(_plan_entries(live, conflicts, entry_of), observed.plan, live, settings)
        decided = _decide_rollout(
            fitted[1], observed, live, settings, now, current=last, held=held, carry=carry
        )
        return fitted, *decided

    (plan, view, text), rollout, progress, work = one_round(current)
    record = read_record(observed.plan_config_map)
    last = current
    more = hold_back(progress, view, record, claims, held=held, now=now)
    if more:
        held = {**held, **more}
        last = rollout  # the halted rollout the new plan's replaces
        # Nodes let in that have no result yet keep their place: they may be changing now.
        carry = {n: rollout.permitted[n] for n in progress.in_flight}
        (plan, view, text), rollout, progress, work = one_round(rollout, carry)
    room = CONFIGMAP_LIMIT * 95 // 100 - len(text.encode("utf-8"))
    record = next_record(view, observed.plan, record, last, reports=_reports(observed), room=room)
    return _Planned(plan, view, text, rollout, progress, work, record)


def _drain_order(live: list[_Profile], changed: frozenset[str], default: Drain) -> DrainOrder:
    """How nodes are drained for a change of these handlers: each changed profile's
    spec.rollout (the operator's --drain where it says nothing, and for the handlers of
    deleted profiles); see ``reconcile.drain``."""
    return drain_order(
        (
            ProfileDrain(
                runtime_class=state.name,  # the RuntimeClass is named after its profile
                mode=state.model.spec.rollout.drain if state.model else None,
                timeout_seconds=state.model.spec.rollout.drain_timeout_seconds
                if state.model
                else None,
                selector=state.model.spec.rollout.evict_pod_selector if state.model else None,
            )
            for state in live
            if state.claimed_handler in changed
        ),
        default,
        unclaimed=bool(changed - {state.claimed_handler for state in live}),
    )


def _drain_work(
    rollout: Rollout, observed: Observed, plan: dict[str, Any], order: DrainOrder
) -> DrainWork:
    """The nodes to drain now, and those the operator cordoned that no longer need it."""
    reports = observed.reports or {}
    changed = frozenset(rollout.changed_handlers)
    uncordon = to_uncordon(
        observed.cordoned,
        rollout.draining,
        rollout.permitted,
        lambda n: n in reports and node_state(reports[n], plan, changed) in ("waiting", "applying"),
    )
    return DrainWork(order=order, drain=tuple(rollout.draining), uncordon=tuple(uncordon))


def _rollout_status(
    state: _Profile, progress: Progress | None
) -> tuple[RolloutStatus | None, tuple[ConditionStatus, str, str] | None]:
    handler = state.claimed_handler
    if state.hold is not None:
        return _held_status(state, progress)
    if progress is None or handler is None or handler not in progress.changed:
        # Untouched by this change: what the last change that touched it said stays, so an
        # unrelated change rewrites no status.
        last = state.current_status
        if last is None:
            return None, None
        previous = find_condition(last.conditions, ROLLED_OUT)
        if previous is None:
            return last.rollout, None
        return last.rollout, (previous.status, previous.reason, previous.message)
    done = f"{progress.done}/{progress.total}"
    if progress.halted is not None:
        message = (
            f"{progress.halted.message}; {done} nodes run the current plan, the others keep "
            f"the last one. Fix the spec, or resume: kubectl annotate wrp {state.name} "
            f"{RESUME_ANNOTATION}=$(date +%s) --overwrite"
        )
        row: tuple[ConditionStatus, str, str] = ("False", "RolloutHalted", message[:1024])
        phase: RolloutPhase = "Halted"
    elif progress.complete:
        row = ("True", "RolloutComplete", f"{done} Windows nodes run the current plan")
        phase = "Complete"
    else:
        row = (
            "False",
            "RollingOut",
            f"{done} Windows nodes run the current plan; the others take it a few at a time",
        )
        phase = "Progressing"
    status = RolloutStatus(
        plan_hash=progress.plan_hash,
        updated=progress.done,
        total=progress.total,
        progress=done,
        state=phase,
    )
    return status, row


def _held_status(
    state: _Profile, progress: Progress | None
) -> tuple[RolloutStatus | None, tuple[ConditionStatus, str, str]]:
    """A held-back profile: which nodes failed and why, what became of its change, and how
    to let it go out again. Other profiles are not halted by it."""
    assert state.hold is not None
    hold, kept = state.hold
    if kept is not None:
        where = (
            f"the plan keeps generation {kept[1].generation} (handler {kept[0]}), its last "
            "rolled-out version, and nodes that took the change go back to it"
        )
    else:
        where = "it never rolled out: its handler leaves the plan and the nodes that took it"
    done = f"{progress.done}/{progress.total}" if progress is not None else None
    ran = f" ({done} nodes run the current plan)" if done else ""
    message = (
        f"{hold.message}; generation {hold.generation} is held back: {where}{ran}; other "
        "profiles' changes go on. Fix the spec, or send the change out again: kubectl "
        f"annotate wrp {state.name} {RESUME_ANNOTATION}=$(date +%s) --overwrite"
    )
    row: tuple[ConditionStatus, str, str] = ("False", "RolloutHalted", message[:1024])
    if progress is None:
        return None, row
    status = RolloutStatus(
        plan_hash=progress.plan_hash,
        updated=progress.done,
        total=progress.total,
        progress=f"{progress.done}/{progress.total}",
        state="Halted",
    )
    return status, row


def _deletion_writes(observed: Observed) -> list[Write]:
    """A deleted profile is not held by a finalizer: the plan is recomputed from the
    profiles that exist, and its RuntimeClass carries a controller reference, so the garbage
    collector deletes it (not when deleted with ``--cascade=orphan``). A profile that still
    carries the finalizer of earlier versions (``FINALIZER``) is let go once the plan
    without its entry is written, its RuntimeClass deleted first, as those versions did."""
    writes: list[Write] = []
    for profile in observed.profiles:
        if not profile.deleting or FINALIZER not in profile.finalizers:
            continue
        observed_rc = observed.runtime_classes.get(profile.name)
        if observed_rc is not None and controlled_by(observed_rc, profile):
            writes.append(
                Write("delete-runtime-class", profile.name, observed=observed_rc, after_plan=True)
            )
        writes.append(
            Write("remove-finalizer", profile.name, observed=profile.body, after_plan=True)
        )
    return writes


def _status_writes(
    live: list[_Profile],
    observed: Observed,
    now: datetime,
    statuses: dict[str, dict[str, Any]],
    events: list[EventNote],
    *,
    progress: Progress | None,
    plan: Mapping[str, Any],
    earlier: Memo,
    memo: Memo,
) -> list[Write]:
    writes: list[Write] = []
    tally = observed.tally if observed.tally is not None else NodeTally.of(observed.nodes)
    entries = plan.get("handlers") or {}
    for state in live:
        handler = state.claimed_handler
        # Nodes are held to what the plan asks of them: the entry they were sent.
        needs = HandlerNeeds.of(entries.get(handler), plan.get("hash")) if handler else None
        nodes = tally.summary(handler, needs) if handler else NodeSummary()
        inputs = _status_inputs(state, nodes, progress, memo)
        known = earlier.statuses.get(state.name)
        if known is not None and known[0] == inputs and known[1] == state.observed.status:
            statuses[state.name] = known[1]  # computed before, and written: nothing changed
            memo.statuses[state.name] = known
            continue
        model = _status(state, nodes, now, progress)
        status = statuses[state.name] = _dumped(model)
        memo.statuses[state.name] = (inputs, status)
        if _dumped(state.current_status) == status:
            continue
        writes.append(
            Write("update-status", state.name, {"status": status}, observed=state.observed.body)
        )
        old = state.current_status.conditions if state.current_status is not None else []
        events += _transition_events(state, old, model.conditions)
    return writes


def _status_inputs(
    state: _Profile, nodes: NodeSummary, progress: Progress | None, memo: Memo
) -> Any:
    """All that ``_status`` reads but the status the profile carries and the clock."""
    handler = state.claimed_handler
    return (
        memo.parsed[state.name][0],
        state.planned,
        state.runtime_class,
        state.owns_runtime_class,
        handler,
        nodes,
        # A held-back profile's status names its hold and counts the current rollout.
        state.hold,
        progress
        if progress is not None and (state.hold is not None or handler in progress.changed)
        else None,
    )


def reconcile(
    observed: Observed, settings: ReconcileSettings, now: datetime, memo: Memo | None = None
) -> Outcome:
    """Everything to write for the observed state, in the phases the controller runs.
    ``memo``: what earlier passes worked out (see ``Memo``); it is updated to this pass."""
    last_good = _last_good(observed.plan)
    earlier, current = memo or Memo(), Memo()  # this pass's profiles only: deleted ones go
    live = [_parsed(p, settings, earlier, current) for p in observed.profiles if not p.deleting]
    claims: dict[str, list[str]] = defaultdict(list)
    for state in live:
        if state.model is None:  # only an invalid spec falls back to the plan's entry
            state.last_good = _trusted_last_good(last_good.get(state.name), state.observed)
        if state.claimed_handler is not None:
            claims[state.claimed_handler].append(state.name)
    conflicts = {h: sorted(names) for h, names in claims.items() if len(names) > 1}

    planned = _plan_and_rollout(
        live, conflicts, observed, settings, now, entry_of=lambda s: current.entry(s, earlier)
    )
    plan, text, progress = planned.view, planned.text, planned.progress
    events: list[EventNote] = []
    statuses: dict[str, dict[str, Any]] = {}
    writes = _live_writes(live, conflicts, observed, events)
    writes += _plan_writes(planned.plan, text, observed, settings.namespace, planned.record)
    writes += _rollout_writes(planned.rollout, observed, settings.namespace)
    writes += _deletion_writes(observed)
    writes += _status_writes(
        live, observed, now, statuses, events,
        progress=progress, plan=plan, earlier=earlier, memo=current,
    )  # fmt: skip
    if memo is not None:
        memo.parsed, memo.statuses, memo.entries = current.parsed, current.statuses, current.entries
    return Outcome(
        writes=writes,
        events=events,
        statuses=statuses,
        plan=plan,
        plan_bytes=len(text.encode("utf-8")),
        rollout=progress,
        drain=planned.drain,
    )
