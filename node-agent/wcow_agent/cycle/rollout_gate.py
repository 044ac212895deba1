"""The gate of one cycle: may this node change config.toml to the plan now, and the record of
its attempts at a plan.

``rollout_verdict.decide`` gives the verdict from data; this acts on it. A change the
rollout lets in is an attempt: recorded on the Node first when the rollout counts on it
(``Pace.announce``), then in the state; the plan is applied once every handler the attempt
changed has passed its canary (``settle``). A plan that leaves config.toml as it is is taken
at once. A change held back leaves config.toml alone and says why, per handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.state import StateJournal
from wcow_agent.cycle.decisions import CycleReport, HandlerOutcome, HostFacts
from wcow_agent.cycle.rollout_verdict import SEEDED, Gate, Permission, decide, holds_agent_tables
from wcow_contract.wire.agent_status import CANNOT_RUN_HERE
from wcow_contract.wire.plan import Plan, PlanEntry


def _recorded(_: CycleReport) -> bool:
    return True


@dataclass(frozen=True)
class Pace:
    """The rollout's word for one cycle. Without one a plan is applied at once."""

    permission: Permission
    node: str
    announce: Callable[[CycleReport], bool] = _recorded
    """Records the attempt (``attempted_plan_hash``) on the Node before config.toml
    changes and containerd restarts; False: it could not, so a paced change waits."""


def open_gate(
    result: MergeResult, journal: StateJournal, plan: Plan, pace: Pace | None, changes_file: bool
) -> Gate:
    return decide(
        pace.permission if pace is not None else Permission(),
        plan.hash,
        pace.node if pace is not None else "",
        changes_file=changes_file,
        holds_tables=holds_agent_tables(result, journal.state.owned),
    )


def begin_attempt(
    report: CycleReport,
    journal: StateJournal,
    facts: HostFacts,
    result: MergeResult,
    eligible: Mapping[str, PlanEntry],
    *,
    verdict: Gate,
    pace: Pace | None,
    config_hash: str | None = None,
) -> Gate:
    """Record that the node starts changing to the plan, on the Node first when the
    rollout counts on it (permitted, or a new node), then in the state. ``config_hash``:
    the configuration the change writes (default: config.toml's text alone)."""
    state, plan_hash = journal.state, str(report.plan_hash)  # the plan of this cycle
    touched = {*result.added, *result.updated} & set(eligible)
    if state.attempted_plan == plan_hash and state.attempt_grant == verdict.grant:
        if not touched <= set(state.unproven):
            journal.attempt_widened(sorted(set(state.unproven) | touched))
        return verdict
    # Only a paced rollout counts on the Node's word; an unpaced plan is reported once,
    # after the cycle, as before.
    if pace is not None and verdict.reason in ("Permitted", "NewNode"):
        notice = _notice(facts, plan_hash, state.applied_plan, touched, eligible)
        if not pace.announce(notice):
            report.requeue = True
            return Gate(
                False,
                "WaitingForRollout",
                f"plan {plan_hash} not begun: the attempt could not be recorded on the "
                "Node, which the rollout counts on; keeping the current config",
            )
    # Let in again for the same plan (the operator's resume): a file containerd refused
    # under the last permission gets one more try, not one per cycle.
    retry = verdict.grant is not None and state.attempted_plan == plan_hash
    journal.attempt_begun(
        plan_hash,
        verdict.grant,
        sorted(touched),
        (config_hash or text_hash(result.text)) if retry else None,
    )
    return verdict


def _notice(
    facts: HostFacts,
    plan_hash: str,
    applied_plan: str | None,
    touched: set[str],
    eligible: Mapping[str, PlanEntry],
) -> CycleReport:
    """What the Node says while the attempt begins: what it is about to change is Pending
    from now on (the last result of those handlers, a failure of an earlier plan say, is
    not this attempt's)."""
    return CycleReport(
        facts=facts,
        plan_hash=plan_hash,
        attempted_plan_hash=plan_hash,
        applied_plan_hash=applied_plan,
        handlers={
            h: HandlerOutcome(
                "Pending", "Applying", f"changing to plan {plan_hash}", eligible[h].generation
            )
            for h in sorted(touched)
        },
    )


def take_unchanged(journal: StateJournal, plan_hash: str) -> None:
    """A plan that leaves config.toml as it is: taken without a restart or permission,
    and applied at once. A handler an earlier attempt failed stays Failed in the status,
    but holds up only the rollouts that change it again on this node."""
    if journal.state.attempted_plan != plan_hash:
        journal.plan_taken(plan_hash)


def settle(report: CycleReport, journal: StateJournal, plan_hash: str) -> None:
    """The attempt's handlers that are proven leave it; with none left, the plan is the
    applied one."""
    state = journal.state
    if state.attempted_plan != plan_hash:
        return
    outcomes = report.handlers or {}
    unproven = sorted(
        h
        for h in state.unproven
        if h in outcomes
        and outcomes[h].state not in ("Ready", "NotEligible")
        # Applied where its pods cannot run (another guest build's pool): done here.
        and outcomes[h].reason not in CANNOT_RUN_HERE
    )
    applied = plan_hash if not unproven else state.applied_plan
    if (unproven, applied) != (state.unproven, state.applied_plan):
        journal.attempt_settled(unproven, applied)


def hold(
    report: CycleReport, journal: StateJournal, result: MergeResult, plan: Plan, why: str
) -> None:
    """Keep config.toml as it is: a handler the plan would change stays Ready on its
    earlier table if that passed its canary (its label stays), else it is Pending."""
    state = journal.state
    report.result = "waiting"
    report.waiting = why
    outcomes = report.handlers if report.handlers is not None else {}
    for handler in sorted({*result.added, *result.updated, *result.removed, *result.restored}):
        mark = state.owned.get(handler)
        if mark == SEEDED or (mark is None and handler not in plan.handlers):
            continue
        if mark is not None and state.canaried.get(handler) == mark:
            outcomes[handler] = HandlerOutcome(
                "Ready",
                "WaitingForRollout",
                "ready with its earlier table; the change waits for rollout permission",
                carried=True,
            )
        else:
            entry = plan.handlers.get(handler)
            outcomes[handler] = HandlerOutcome(
                "Pending",
                "WaitingForRollout",
                "not applied yet: waits for rollout permission",
                entry.generation if entry is not None else None,
            )
    report.handlers = outcomes
