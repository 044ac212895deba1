"""Each live profile's status: its conditions from the rows the other steps decided, the
status write when it changed, and the Events of its transitions.

The conditions follow the API conventions (``wcow_contract.conditions.set_condition``: a
condition's time changes only when its status does). Ready is the first condition that is not
True among Valid, Planned, RuntimeClassReady and (for a gated profile) NodesReady; RolledOut
never gates it; Reconciling and Stalled say the same for kstatus
(``reconcile.kstatus_conditions``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
from wcow_contract.v1alpha1 import (
    Condition,
    ConditionStatus,
    NodeCounts,
    WindowsRuntimeProfileStatus,
)
from wcow_operator.reconcile.kstatus_conditions import reconciling_and_stalled
from wcow_operator.reconcile.model import EventNote, Observed, Row, Write, profile_event
from wcow_operator.reconcile.nodes import HandlerNeeds, NodeSummary, NodeTally, describe
from wcow_operator.reconcile.planning import Held
from wcow_operator.reconcile.profiles import Memo, Profiles, ProfileState
from wcow_operator.reconcile.rollout_condition import rollout_status
from wcow_operator.reconcile.rollout_decision import Progress


@dataclass(frozen=True)
class Decided:
    """What the earlier steps decided about one profile, that its status reports."""

    planned: Row
    runtime_class: Row
    owns_runtime_class: bool
    hold: Held | None


@dataclass(frozen=True)
class Statuses:
    """The status writes and transition Events of a pass, and every live profile's status
    (written or not)."""

    writes: list[Write]
    events: list[EventNote]
    statuses: dict[str, dict[str, Any]]


def profile_statuses(
    profiles: Profiles,
    decided: Mapping[str, Decided],
    observed: Observed,
    now: datetime,
    *,
    progress: Progress | None,
    plan: Mapping[str, Any],
    earlier: Memo,
    memo: Memo,
) -> Statuses:
    """Each live profile's status, worked out again only where its inputs changed (``Memo``;
    ``memo`` records this pass's)."""
    found = Statuses([], [], {})
    tally = observed.tally if observed.tally is not None else NodeTally.of(observed.nodes)
    entries = plan.get("handlers") or {}
    for state in profiles.live:
        handler = state.claimed_handler
        # Nodes are held to what the plan asks of them: the entry they were sent.
        needs = HandlerNeeds.of(entries.get(handler), plan.get("hash")) if handler else None
        nodes = tally.summary(handler, needs) if handler else NodeSummary()
        ours = decided[state.name]
        inputs = _status_inputs(state, ours, nodes, progress)
        known = earlier.statuses.get(state.name)
        if known is not None and known[0] == inputs and known[1] == state.observed.status:
            found.statuses[state.name] = known[1]  # computed before, and written: nothing changed
            memo.statuses[state.name] = known
            continue
        model = status_of(state, ours, nodes, now, progress)
        status = found.statuses[state.name] = dumped(model)
        memo.statuses[state.name] = (inputs, status)
        if dumped(state.current_status) == status:
            continue
        body = state.observed.body
        found.writes.append(
            Write(
                "update-status",
                state.name,
                {"status": status},
                observed=body,
                if_runtime_class_failed=functools.partial(_failed_write, state.name, body, status),
            )
        )
        old = state.current_status.conditions if state.current_status is not None else []
        found.events.extend(_transition_events(state, old, model.conditions))
    return found


def _status_inputs(
    state: ProfileState, decided: Decided, nodes: NodeSummary, progress: Progress | None
) -> Any:
    """All that ``status_of`` reads but the status the profile carries and the clock."""
    handler = state.claimed_handler
    return (
        state.inputs,
        decided,
        handler,
        nodes,
        # A held-back profile's status names its hold and counts the current rollout.
        progress
        if progress is not None and (decided.hold is not None or handler in progress.changed)
        else None,
    )


def status_of(
    state: ProfileState,
    decided: Decided,
    nodes: NodeSummary,
    now: datetime,
    progress: Progress | None,
) -> WindowsRuntimeProfileStatus:
    rollout, row = rollout_status(state, decided.hold, progress)
    return WindowsRuntimeProfileStatus(
        observed_generation=state.observed.generation,
        conditions=_conditions(state, decided, nodes, now, row),
        rollout=rollout,
        handler=state.claimed_handler,
        runtime_class_name=state.name if decided.owns_runtime_class else None,
        nodes=NodeCounts(eligible=nodes.eligible, ready=nodes.ready, failed=nodes.failed),
        failures=nodes.failures,
    )


def _nodes_condition(nodes: NodeSummary, selector: Mapping[str, str] | None = None) -> Row:
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
    state: ProfileState, decided: Decided, nodes: NodeSummary, now: datetime, rollout: Row | None
) -> list[Condition]:
    current = state.current_status.conditions if state.current_status is not None else []
    if state.model is not None:
        valid: Row = ("True", "SpecValid", "")
    else:
        valid = ("False", "InvalidSpec", "; ".join(state.problems))
    selector = state.model.spec.scheduling.node_selector if state.model is not None else None
    rows = [
        (VALID, valid),
        (PLANNED, decided.planned),
        (RUNTIME_CLASS_READY, decided.runtime_class),
        (NODES_READY, _nodes_condition(nodes, selector)),
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
        ready: Row = ("False", reason, f"{type_} is not True")
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
    return _set_rows(current, rows, state.observed.generation, now)


def _set_rows(
    current: list[Condition], rows: list[tuple[str, Row]], generation: int | None, now: datetime
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


def _failed_write(
    target: str, observed: dict[str, Any], status: dict[str, Any], error: Exception, now: datetime
) -> Write | None:
    """The status write instead of ``status``'s when writing the RuntimeClass failed with
    ``error``; None when the profile says so already (a persistent failure writes nothing)."""
    failed = runtime_class_failed(status, error, now)
    if normalized_status(observed.get("status") or {}) == failed:
        return None
    return Write("update-status", target, {"status": failed}, observed=observed)


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
    """A status as read, as it would be written (``{"unreadable": True}``: not a status)."""
    try:
        model = WindowsRuntimeProfileStatus.model_validate(status)
    except ValidationError:
        return {"unreadable": True}
    return dumped(model)


def dumped(model: WindowsRuntimeProfileStatus | None) -> dict[str, Any]:
    """A status as written (and compared): camelCase, no empty fields."""
    if model is None:
        return {"unreadable": True}
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _transition_events(
    state: ProfileState, before: list[Condition], after: list[Condition]
) -> list[EventNote]:
    events = []
    profile = state.observed
    old, new = find_condition(before, ROLLED_OUT), find_condition(after, ROLLED_OUT)
    if new is not None and (old is None or old.reason != new.reason):
        if new.reason == "RolloutHalted":
            events.append(profile_event(profile, "Warning", new.reason, new.message))
        elif new.reason == "RolloutComplete" and old is not None:
            events.append(profile_event(profile, "Normal", new.reason, new.message))
    for type_ in (VALID, PLANNED, RUNTIME_CLASS_READY):
        old, new = find_condition(before, type_), find_condition(after, type_)
        if new is None or (
            old is not None
            and (old.status, old.reason, old.message) == (new.status, new.reason, new.message)
        ):
            continue
        if new.status == "False" and new.reason != "Pending":
            events.append(profile_event(profile, "Warning", new.reason, new.message or new.reason))
        elif type_ == VALID and old is not None and old.status == "False":
            events.append(profile_event(profile, "Normal", "SpecValid", "the spec is valid again"))
    return events
