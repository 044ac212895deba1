"""The plan and its rollout, decided together: a failure the rollout finds holds its handler
back, and the plan is made again without that handler's change (``reconcile.holds``).

One round places every profile in the plan (``planning``), fits it under the size limit and
decides who may change to it now (``rollout_decision``) and which nodes to drain
(``drain``). When that round finds the rollout halted by handlers' failures, a second round
makes the plan with those handlers held back: a new rollout, which starts with the nodes the
halted one had let in and that have not reported yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wcow_contract.v1alpha1 import Drain
from wcow_contract.wire.plan import PlanEntry
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, ROLLOUT_KEY, Hold, Rollout, parse_rollout
from wcow_operator.reconcile.drain import (
    DrainOrder,
    DrainWork,
    ProfileDrain,
    drain_order,
    to_uncordon,
)
from wcow_operator.reconcile.holds import (
    Record,
    hold_back,
    kept_entry,
    next_record,
    read_record,
    standing,
)
from wcow_operator.reconcile.model import (
    CONFIGMAP_LIMIT,
    Observed,
    ReconcileSettings,
    Row,
    Write,
)
from wcow_operator.reconcile.nodes import NodeTally
from wcow_operator.reconcile.planning import (
    FittedPlan,
    Held,
    PlanEntries,
    fit_plan,
    plan_entries,
    planned_rows,
)
from wcow_operator.reconcile.profiles import Profiles, ProfileState
from wcow_operator.reconcile.rollout_decision import (
    NodeReport,
    Progress,
    decide,
    node_state,
    parse_max_unavailable,
)
from wcow_operator.render.configmaps import rollout_config_map


@dataclass(frozen=True)
class Planned:
    """The plan and its rollout as one pass decides them, with each live profile's Planned
    row and the profiles held back."""

    fitted: FittedPlan
    rollout: Rollout
    progress: Progress
    drain: DrainWork
    record: Record  # what the rollout's handlers had before, written beside the plan
    planned: dict[str, Row]
    holds: dict[str, Held]


@dataclass(frozen=True)
class _Round:
    holds: dict[str, Held]
    placed: PlanEntries
    fitted: FittedPlan
    rollout: Rollout
    progress: Progress
    drain: DrainWork


@dataclass(frozen=True)
class _Pass:
    """What every round of a pass reads."""

    profiles: Profiles
    observed: Observed
    settings: ReconcileSettings
    now: datetime
    entry_of: Callable[[ProfileState], PlanEntry]


def plan_and_rollout(
    profiles: Profiles,
    observed: Observed,
    settings: ReconcileSettings,
    now: datetime,
    *,
    entry_of: Callable[[ProfileState], PlanEntry],
) -> Planned:
    """The plan with the held-back profiles' last rolled-out entries, and its rollout.
    ``entry_of``: a valid profile's plan entry (the memo's, or made anew)."""
    this = _Pass(profiles, observed, settings, now, entry_of)
    claims = profiles.claims()
    current = observed_rollout(observed)
    held = standing(current.held if current else {}, claims)
    chosen = _round(this, held, current)
    record = read_record(observed.plan_config_map)
    last = current
    more = hold_back(chosen.progress, chosen.fitted.view, record, claims, held=held, now=now)
    if more:
        halted = chosen.rollout  # the halted rollout the new plan's replaces
        # Nodes let in that have no result yet keep their place: they may be changing now.
        carry = {n: halted.permitted[n] for n in chosen.progress.in_flight}
        chosen, last = _round(this, {**held, **more}, halted, carry), halted
    room = CONFIGMAP_LIMIT * 95 // 100 - len(chosen.fitted.text.encode("utf-8"))
    view = chosen.fitted.view
    record = next_record(view, observed.plan, record, last, reports=reports(observed), room=room)
    return Planned(
        fitted=chosen.fitted,
        rollout=chosen.rollout,
        progress=chosen.progress,
        drain=chosen.drain,
        record=record,
        planned=planned_rows(profiles, chosen.placed, chosen.fitted),
        holds=chosen.holds,
    )


def _round(
    this: _Pass,
    held: Mapping[str, Hold],
    last: Rollout | None,
    carry: Mapping[str, str] | None = None,
) -> _Round:
    """The plan with the profiles of ``held`` held back (each with the entry the plan keeps
    instead, checked when the hold was read or made: ``holds.standing``, ``holds.hold_back``),
    and its rollout after ``last``."""
    holds = {name: (hold, kept_entry(name, hold)) for name, hold in held.items()}
    placed = plan_entries(this.profiles, holds, this.entry_of)
    fitted = fit_plan(placed.entries, this.observed.plan, this.settings)
    rollout, progress, work = _decide_rollout(this, fitted, current=last, held=held, carry=carry)
    return _Round(holds, placed, fitted, rollout, progress, work)


def _decide_rollout(
    this: _Pass,
    fitted: FittedPlan,
    *,
    current: Rollout | None,
    held: Mapping[str, Hold],
    carry: Mapping[str, str] | None = None,
) -> tuple[Rollout, Progress, DrainWork]:
    """Who may change to the plan now (``reconcile.rollout_decision``), and the drainer's work."""
    live, settings, observed = this.profiles.live, this.settings, this.observed
    found = reports(observed)
    limits = {
        state.claimed_handler: state.model.spec.rollout.max_unavailable
        for state in live
        if state.model is not None
        and state.claimed_handler is not None
        and state.model.spec.rollout.max_unavailable is not None
    }
    resume = sorted(f"{state.name}={value}" for state in live if (value := state.resume))
    rollout, progress = decide(
        plan=fitted.view,
        previous_plan=observed.plan,
        current=current,
        reports=found,
        max_unavailable=lambda changed: min(
            (
                parse_max_unavailable(limits.get(h, settings.max_unavailable), len(found))
                for h in changed
            ),
            default=parse_max_unavailable(settings.max_unavailable, len(found)),
        ),
        resume_key=";".join(resume),
        now=this.now,
        timeout=settings.rollout_timeout,
        drain=lambda changed: _drain_order(live, changed, settings.drain, held),
        drains=observed.drains,
        held=held,
        carry=carry,
    )
    order = _drain_order(live, progress.changed, settings.drain, held)
    return rollout, progress, _drain_work(rollout, observed, fitted.view, order)


def reports(observed: Observed) -> Mapping[str, NodeReport]:
    """The nodes' plan reports by node name: the cache's, or read from the nodes."""
    found = observed.reports
    return NodeTally.reports(observed.nodes) if found is None else found


def observed_rollout(observed: Observed) -> Rollout | None:
    return parse_rollout(((observed.rollout_config_map or {}).get("data") or {}).get(ROLLOUT_KEY))


def rollout_writes(rollout: Rollout, observed: Observed, namespace: str) -> list[Write]:
    """The rollout ConfigMap's write, if the decision differs from it."""
    if rollout == observed_rollout(observed):
        return []
    body = rollout_config_map(rollout, namespace)
    config_map = observed.rollout_config_map
    return [Write("write-rollout", ROLLOUT_CONFIGMAP, body, observed=config_map, after_plan=True)]


def _drain_order(
    live: tuple[ProfileState, ...],
    changed: frozenset[str],
    default: Drain,
    held: Mapping[str, Hold],
) -> DrainOrder:
    """How nodes are drained for a change of these handlers: each changed profile's
    spec.rollout (the operator's --drain where it says nothing, and for the handlers of
    deleted profiles); see ``reconcile.drain``. A held-back profile's pods are not evicted
    while its change is taken back (at most cordoned): a pod that held up the drain would
    hold up the way back too."""
    return drain_order(
        (
            ProfileDrain(
                runtime_class=state.name,  # the RuntimeClass is named after its profile
                mode=_held_drain(state.model.spec.rollout.drain, default)
                if state.model and state.name in held
                else (state.model.spec.rollout.drain if state.model else None),
                timeout_seconds=state.model.spec.rollout.drain_timeout_seconds
                if state.model
                else None,
                selector=state.model.spec.rollout.evict_pod_selector if state.model else None,
                handler=state.claimed_handler,
            )
            for state in live
            if state.claimed_handler in changed
        ),
        default,
        unclaimed=bool(changed - {state.claimed_handler for state in live}),
    )


def _held_drain(mode: Drain | None, default: Drain) -> Drain:
    return "Cordon" if (mode or default) == "Evict" else (mode or default)


def _drain_work(
    rollout: Rollout, observed: Observed, plan: Mapping[str, Any], order: DrainOrder
) -> DrainWork:
    """The nodes to drain now, and those the operator cordoned that no longer need it."""
    found = observed.reports or {}
    changed = frozenset(rollout.changed_handlers)
    uncordon = to_uncordon(
        observed.cordoned,
        rollout.draining,
        rollout.permitted,
        lambda n: n in found and node_state(found[n], plan, changed) in ("waiting", "applying"),
    )
    return DrainWork(order=order, drain=tuple(rollout.draining), uncordon=tuple(uncordon))
