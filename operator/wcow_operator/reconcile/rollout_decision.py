"""Paced rollout: who may change to the current plan, decided from the nodes' own reports.

A plan change reaches at most ``maxUnavailable`` nodes at a time. A node is unavailable from
the moment it is allowed to change (or reports that it is trying the plan) until its agent
reports the plan applied with its canaries passed. A node that fails (canary failure,
containerd rolled back, or no result within the timeout) halts the rollout: nobody new is
let in, nodes already done keep the new config, nodes not started keep the old one. A new
plan starts a new rollout; a new value of the resume annotation on a changed profile resumes
a halted one. Everything the decision needs is in the rollout ConfigMap and the Node reports,
so a new leader continues where the last one stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from wcow_contract.conditions import timestamp
from wcow_contract.v1alpha1 import NodeFailure
from wcow_contract.wire.agent_status import failed_change
from wcow_contract.wire.rollout import Halt, Hold, Rollout
from wcow_operator.reconcile import drain as draining_
from wcow_operator.reconcile.drain import DRAIN_TIMEOUT

NodeState = Literal["done", "applying", "failed", "waiting"]
MAX_LISTED = 5


@dataclass(frozen=True)
class NodeReport:
    """What one node's agent says about plans (parsed once, when the node changes)."""

    applied_plan_hash: str | None
    attempted_plan_hash: str | None
    states: Mapping[str, tuple[str, str, str]]  # handler -> (state, reason, message)
    # handler -> the profile generation the state is about (None: the agent did not say)
    generations: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Progress:
    plan_hash: str
    changed: frozenset[str]
    done: int = 0
    applying: int = 0
    failed: int = 0
    total: int = 0  # nodes with an agent
    halted: Halt | None = None
    failures: list[NodeFailure] = field(default_factory=list)
    halted_now: bool = False  # halted by this pass's failures (not one already written)
    # handler -> its failures on nodes that report it Failed for this plan (at most
    # MAX_LISTED each); failures no handler accounts for (timeouts, drains) are apart.
    culprits: Mapping[str, tuple[NodeFailure, ...]] = field(default_factory=dict)
    unattributed: tuple[NodeFailure, ...] = ()
    # Permitted nodes with no result yet: they may be changing their config.toml now.
    in_flight: tuple[str, ...] = ()
    held: tuple[str, ...] = ()  # profiles whose change is held back (``reconcile.holds``)

    @property
    def complete(self) -> bool:
        return self.done == self.total


def parse_max_unavailable(value: int | str, nodes: int) -> int:
    """A count, or a percentage of the nodes rounded up (as a DaemonSet does); at least 1."""
    if isinstance(value, str):
        percent = int(value.rstrip("%"))
        return max(1, math.ceil(nodes * percent / 100))
    return max(1, value)


def changed_handlers(previous: Mapping[str, Any] | None, plan: Mapping[str, Any]) -> frozenset[str]:
    """Handlers added, removed or changed between two plans; all of them without a previous."""
    new = plan.get("handlers") or {}
    if previous is None:
        return frozenset(new)
    old = previous.get("handlers") or {}
    return frozenset(h for h in set(old) | set(new) if old.get(h) != new.get(h))


def _failed(report: NodeReport, handler: str, plan: Mapping[str, Any]) -> bool:
    """Whether the node reports ``handler`` failed for this plan. Only the plan's own
    entries can fail it: a Failed or Conflict state of a handler the plan removes (a profile
    renamed its failing handler), or about an earlier generation (left from the attempt the
    plan replaces), is the old attempt's, which a node reports until its agent is done. A
    node that cannot run the class by what it is (a pool of another guest build) has not
    failed it (``failed_change``)."""
    state, reason, _ = report.states.get(handler, ("", "", ""))
    if not failed_change(state, reason):
        return False
    entries = plan.get("handlers") or {}
    if handler not in entries:
        return False
    wanted = (entries.get(handler) or {}).get("generation")
    said = report.generations.get(handler)
    return wanted is None or said is None or said == wanted


def node_state(report: NodeReport, plan: Mapping[str, Any], changed: frozenset[str]) -> NodeState:
    plan_hash = plan["hash"]
    if report.applied_plan_hash == plan_hash and report.attempted_plan_hash in (None, plan_hash):
        # (A node that tried a later plan and failed is not done with this one, though it
        # still runs it: a held-back change takes the plan back to what it had.)
        return "done"
    if report.attempted_plan_hash == plan_hash:
        broken = any(_failed(report, h, plan) for h in changed)
        return "failed" if broken else "applying"
    return "waiting"


def still_busy(
    last: Rollout, reports: Mapping[str, NodeReport], *, now: datetime, timeout: timedelta
) -> dict[str, str]:
    """The nodes the replaced rollout let in that may still be changing to its plan: not
    done with it, no failure reported, or not begun yet (a permission does not end with
    its rollout: an agent that read it may start at any moment). They keep their place in
    the new rollout, so its maxUnavailable counts them; a grant older than ``timeout``
    starts again from now, so a halted rollout left for a while does not time them out."""
    busy: dict[str, str] = {}
    for name, granted in last.permitted.items():
        report = reports.get(name)
        if report is None or report.applied_plan_hash == last.plan_hash:
            continue
        states = report.states.values()
        if report.attempted_plan_hash == last.plan_hash and any(
            failed_change(s[0], s[1]) for s in states
        ):
            continue
        fresh = now - _time(granted) <= timeout
        busy[name] = granted if fresh else timestamp(now)
    return busy


def changing_earlier_plan(report: NodeReport, plan_hash: str) -> bool:
    """Whether the node is in the middle of changing to another plan: its attempt began (the
    handlers it touches say Pending, Applying) and has not ended (proven, failed or held
    back on the node's next cycle, which it reports). A node stays so for one cycle at most."""
    attempted = report.attempted_plan_hash
    if attempted in (None, plan_hash, report.applied_plan_hash):
        return False
    return any(s[:2] == ("Pending", "Applying") for s in report.states.values())


def _handler_failures(
    name: str, report: NodeReport, changed: frozenset[str], plan: Mapping[str, Any]
) -> dict[str, NodeFailure]:
    """handler -> how it failed on this node, for the changed handlers it reports failed."""
    found: dict[str, NodeFailure] = {}
    for handler in sorted(changed):
        _, reason, message = report.states.get(handler, ("", "", ""))
        if _failed(report, handler, plan):
            text = f"{handler}: {message}"[:1024]
            found[handler] = NodeFailure(node=name, reason=reason[:128], message=text)
    return found


def _failure(
    name: str, report: NodeReport, changed: frozenset[str], plan: Mapping[str, Any]
) -> NodeFailure:
    for failure in _handler_failures(name, report, changed, plan).values():
        return failure
    return NodeFailure(node=name, reason="Failed", message="the plan failed on this node")


def _culprits(
    reports: Mapping[str, NodeReport],
    plan: Mapping[str, Any],
    changed: frozenset[str],
    failures: list[NodeFailure],
    drain_blame: Callable[[str], frozenset[str]] = lambda node: frozenset(),
) -> tuple[dict[str, tuple[NodeFailure, ...]], tuple[NodeFailure, ...]]:
    """The failures by the handler that failed (a node reports it Failed for this plan, or
    its pods held up the node's drain), and those of no handler (no result in time, a drain
    that timed out with no pod of a changed class to blame)."""
    by_handler: dict[str, list[NodeFailure]] = {}
    unattributed: list[NodeFailure] = []
    for failure in failures:
        report = reports.get(failure.node)
        found = _handler_failures(failure.node, report, changed, plan) if report else {}
        if failure.reason == DRAIN_TIMEOUT:
            found = dict.fromkeys(sorted(drain_blame(failure.node) & changed), failure)
        if failure.reason in ("RolloutTimeout",) or not found:
            unattributed.append(failure)
            continue
        for handler, one in found.items():
            by_handler.setdefault(handler, []).append(one)
    return {h: tuple(f[:MAX_LISTED]) for h, f in by_handler.items()}, tuple(unattributed)


def decide(
    *,
    plan: Mapping[str, Any],
    previous_plan: Mapping[str, Any] | None,
    current: Rollout | None,
    reports: Mapping[str, NodeReport],
    max_unavailable: Callable[[frozenset[str]], int],
    resume_key: str,
    now: datetime,
    timeout: timedelta,
    drain: Callable[[frozenset[str]], draining_.DrainOrder] | None = None,
    drains: Mapping[str, draining_.DrainProgress] | None = None,
    held: Mapping[str, Hold] | None = None,
    carry: Mapping[str, str] | None = None,
) -> tuple[Rollout, Progress]:
    """The rollout for ``plan`` after this pass, and where it stands (``reconcile.drain``).
    ``held``: the profiles held back (``reconcile.holds``), kept in the rollout as given.
    ``carry``: permissions a new rollout starts with (nodes still busy with the plan it
    replaces, which count against maxUnavailable until they are done with this one)."""
    held = held or {}
    plan_hash = str(plan["hash"])
    if current is None or current.plan_hash != plan_hash:
        if carry is None and current is not None:
            carry = still_busy(current, reports, now=now, timeout=timeout)
        current = _start(plan, previous_plan, current, len(reports), resume_key)
        current = current.model_copy(update={"permitted": dict(sorted((carry or {}).items()))})
    changed = frozenset(current.changed_handlers)
    permitted = {n: t for n, t in current.permitted.items() if n in reports}  # gone: freed
    halted = current.halted
    if halted is not None and resume_key != current.resumed_by:
        failed = {f.node for f in halted.nodes}
        permitted = {n: t for n, t in permitted.items() if n not in failed}  # re-granted later
        halted = None

    states, failures = _node_states(reports, plan, changed, permitted, now=now, timeout=timeout)
    turn = draining_.Turn(drain(changed) if drain and halted is None else None, drains or {}, now)
    draining, failures = turn.settle(current.draining, reports, permitted, failures)
    halted_now = bool(failures) and halted is None
    if halted_now:
        halted = _halt(failures, now)
    limit = max_unavailable(changed)
    # Nodes still changing to an earlier plan (a resume or a fix came while they applied)
    # are unavailable all the same: the new rollout lets in only what is left beside them.
    room = limit - sum(
        1 for n, r in reports.items() if n not in permitted and changing_earlier_plan(r, plan_hash)
    )
    if halted is None:
        turn.admit(permitted, draining, lambda granted: _permit(states, granted, room, now))
    rollout = Rollout(
        plan_hash=plan_hash,
        changed_handlers=sorted(changed),
        max_unavailable=limit,
        permitted=dict(sorted(permitted.items())),
        halted=halted,
        resumed_by=resume_key,
        draining=dict(sorted(draining.items())) if halted is None else {},  # halted: let go
        held=dict(sorted(held.items())),
    )
    halt = (halted_now, turn.blamed)
    return rollout, _progress(rollout, states, failures, reports, plan, halt=halt)


def _progress(
    rollout: Rollout,
    states: Mapping[str, NodeState],
    failures: list[NodeFailure],
    reports: Mapping[str, NodeReport],
    plan: Mapping[str, Any],
    *,
    halt: tuple[bool, Callable[[str], frozenset[str]]],
) -> Progress:
    """Where the rollout stands; ``halt``: (halted by this pass's failures, the handlers
    whose pods held up each node's drain)."""
    halted_now, drain_blame = halt
    changed = frozenset(rollout.changed_handlers)
    culprits, unattributed = (
        _culprits(reports, plan, changed, failures, drain_blame) if halted_now else ({}, ())
    )
    counts = {s: sum(1 for v in states.values() if v == s) for s in ("done", "failed")}
    return Progress(
        plan_hash=rollout.plan_hash,
        changed=changed,
        done=counts["done"],
        applying=len([n for n in rollout.permitted if states.get(n) in ("applying", "waiting")]),
        failed=counts["failed"],
        total=len(reports),
        halted=rollout.halted,
        failures=failures[:MAX_LISTED],
        halted_now=halted_now,
        culprits=culprits,
        unattributed=unattributed,
        in_flight=tuple(n for n in rollout.permitted if states.get(n) in ("applying", "waiting")),
        held=tuple(rollout.held),
    )


def _halt(failures: list[NodeFailure], now: datetime) -> Halt:
    names = ", ".join(f"{f.node} ({f.reason})" for f in failures[:MAX_LISTED])
    first = failures[0]  # its own words: a failed canary's error, the pods a drain waited on
    return Halt(
        reason="NodeFailed",
        # At most 400 of its words, so the status still has room for how to resume.
        message=f"stopped after a node failed the change: {names}; {first.node}: "
        f"{first.message[:400]}",
        since=timestamp(now),
        nodes=failures[:MAX_LISTED],
    )


def _node_states(
    reports: Mapping[str, NodeReport],
    plan: Mapping[str, Any],
    changed: frozenset[str],
    permitted: Mapping[str, str],
    *,
    now: datetime,
    timeout: timedelta,
) -> tuple[dict[str, NodeState], list[NodeFailure]]:
    """Where each node stands, and the failures by node name: its own report's, or no
    result within ``timeout`` of its permission."""
    states: dict[str, NodeState] = {}
    for name, report in sorted(reports.items()):
        state = node_state(report, plan, changed)
        if state == "failed" and name not in permitted:
            state = "waiting"  # failed before a resume, or on its own: tried again when let in
        states[name] = state
    failures = [_failure(n, reports[n], changed, plan) for n, s in states.items() if s == "failed"]
    for name, granted in permitted.items():
        if states[name] in ("waiting", "applying") and now - _time(granted) > timeout:
            states[name] = "failed"
            failures.append(
                NodeFailure(
                    node=name,
                    reason="RolloutTimeout",
                    message=f"no result within {int(timeout.total_seconds())} s of permission",
                )
            )
    failures.sort(key=lambda f: f.node)
    return states, failures


def _permit(
    states: Mapping[str, NodeState], permitted: dict[str, str], limit: int, now: datetime
) -> None:
    """Let waiting nodes in, in name order, until ``limit`` nodes are busy with the change."""
    busy = [n for n, s in states.items() if s == "applying" or (n in permitted and s == "waiting")]
    budget = limit - len(busy)
    for name, state in states.items():
        if budget <= 0:
            break
        if state == "waiting" and name not in permitted:
            permitted[name] = timestamp(now)
            budget -= 1


def _start(
    plan: Mapping[str, Any],
    previous_plan: Mapping[str, Any] | None,
    last: Rollout | None,
    nodes: int,
    resume_key: str,
) -> Rollout:
    """A new rollout: nobody permitted yet, the resume annotations as they are now."""
    changed = changed_handlers(previous_plan, plan) | carried(previous_plan, last, nodes)
    return Rollout(
        plan_hash=str(plan["hash"]),
        changed_handlers=sorted(changed),
        max_unavailable=1,
        resumed_by=resume_key,
    )


def carried(
    previous_plan: Mapping[str, Any] | None, last: Rollout | None, nodes: int
) -> frozenset[str]:
    """The handlers of the last plan's rollout when it had not reached every node: nodes
    that had not reached the last plan still need its changes too."""
    if last is None or last.plan_hash != (previous_plan or {}).get("hash"):
        return frozenset()
    if last.halted is None and len(last.permitted) >= nodes:
        return frozenset()
    return frozenset(last.changed_handlers)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def next_timeout(rollout: Rollout | None, timeout: timedelta, now: datetime) -> float | None:
    """Seconds until the earliest permission would pass ``timeout``; None when none will.
    No event marks that moment (a node that hangs says nothing), so the runner schedules a
    pass for it instead of halting only at the next resync. Permissions of nodes already
    done count too: a pass at their deadline finds nothing to do."""
    if rollout is None or rollout.halted is not None:
        return None
    left = [(_time(t) + timeout - now).total_seconds() for t in rollout.permitted.values()]
    # A second past the deadline: the pass must see ``now - granted > timeout``.
    return min((s + 1.0 for s in left if s >= 0), default=None)
