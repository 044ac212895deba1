"""RolledOut and ``status.rollout``: how far the change of a profile's handler has gone.

A profile untouched by the current rollout keeps what the last change that touched it said,
so an unrelated change rewrites no status. A held-back profile says which nodes failed, what
became of its change, and how to send it out again; other profiles are not halted by it.
"""

from __future__ import annotations

from typing import Literal

from wcow_contract.conditions import ROLLED_OUT, find_condition
from wcow_contract.v1alpha1 import RolloutStatus
from wcow_contract.wire.rollout import RESUME_ANNOTATION
from wcow_operator.reconcile.model import Row
from wcow_operator.reconcile.planning import Held
from wcow_operator.reconcile.profiles import ProfileState
from wcow_operator.reconcile.rollout_decision import Progress

RolloutPhase = Literal["Progressing", "Complete", "Halted"]


def rollout_status(
    state: ProfileState, hold: Held | None, progress: Progress | None
) -> tuple[RolloutStatus | None, Row | None]:
    """The profile's ``status.rollout`` and RolledOut row (None: no change of its handler
    ever rolled out: RolledOut says none is pending)."""
    handler = state.claimed_handler
    if hold is not None:
        return _held_status(state, hold, progress)
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
        row: Row = ("False", "RolloutHalted", message[:1024])
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
    state: ProfileState, held: Held, progress: Progress | None
) -> tuple[RolloutStatus | None, Row]:
    """A held-back profile: which nodes failed and why, what became of its change, and how
    to let it go out again. Other profiles are not halted by it."""
    hold, kept = held
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
    row: Row = ("False", "RolloutHalted", message[:1024])
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
