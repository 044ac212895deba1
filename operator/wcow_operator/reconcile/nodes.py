"""Per-handler node counts from the agents' Node annotations and ready labels.

Each node contributes to the handlers its agent reports; a ``NodeTally`` adds and removes
contributions one node at a time, so a change on one node costs work for that node only,
whatever the size of the fleet.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from wcow_operator.api.agent_status import AgentStatus
from wcow_operator.api.v1alpha1 import NodeFailure
from wcow_operator.reconcile.model import ObservedNode
from wcow_operator.reconcile.rollout import NodeReport
from wcow_operator.render.runtimeclass import READY_VALUE, ready_label

MAX_FAILURES = 5
# NotEligible reasons that a platform team can act on (the node's containerd drops settings
# the handler needs): listed with the failures, though the node is not counted as eligible.
ACTIONABLE_INELIGIBILITY = frozenset({"ContainerdTooOld"})


@dataclass(frozen=True)
class NodeSummary:
    eligible: int = 0
    ready: int = 0
    failed: int = 0
    failures: list[NodeFailure] = field(default_factory=list)
    without_agent: int = 0  # Windows nodes with no readable agent status
    ineligible: int = 0  # nodes that cannot run it for an actionable reason (in failures)


def parse_agent_status(raw: str | None) -> AgentStatus | None:
    if not raw:
        return None
    try:
        return AgentStatus.model_validate_json(raw)
    except ValidationError:
        return None


@dataclass(frozen=True)
class HandlerStanding:
    """Where one node stands for one handler it reports (NotEligible ones are left out,
    but for the actionable reasons)."""

    ready: bool
    failure: NodeFailure | None  # Failed or Conflict, and not labelled ready
    eligible: bool = True


@dataclass(frozen=True)
class Contribution:
    has_agent: bool
    handlers: Mapping[str, HandlerStanding]
    report: NodeReport | None = None  # what the rollout reads


def contribution(node: ObservedNode) -> Contribution:
    """What ``node`` adds to each handler's counts. Ready only with the label (the scheduler
    reads the label, so the label decides); eligible when its agent reports the handler as
    anything but NotEligible; failed when it reports Failed or Conflict."""
    status = parse_agent_status(node.agent_status)
    if status is None:
        return Contribution(False, {})
    report = NodeReport(
        applied_plan_hash=status.applied_plan_hash,
        attempted_plan_hash=status.attempted_plan_hash,
        states={h: (e.state, e.reason, e.message) for h, e in status.handlers.items()},
        generations={h: e.profile_generation for h, e in status.handlers.items()},
    )
    standings: dict[str, HandlerStanding] = {}
    for handler, entry in status.handlers.items():
        if entry.state == "NotEligible":
            if entry.reason in ACTIONABLE_INELIGIBILITY:
                note = NodeFailure(node=node.name, reason=entry.reason, message=entry.message)
                standings[handler] = HandlerStanding(False, note, eligible=False)
            continue
        ready = node.labels.get(ready_label(handler)) == READY_VALUE
        failure = None
        if not ready and entry.state in ("Failed", "Conflict"):
            failure = NodeFailure(node=node.name, reason=entry.reason, message=entry.message[:1024])
        standings[handler] = HandlerStanding(ready, failure)
    return Contribution(True, standings, report)


@dataclass
class _Counts:
    eligible: int = 0
    ready: int = 0
    failures: dict[str, NodeFailure] = field(default_factory=dict)  # by node name
    ineligible: dict[str, NodeFailure] = field(default_factory=dict)  # actionable, by node

    def empty(self) -> bool:
        return not (self.eligible or self.ineligible)


class NodeTally:
    """Running per-handler counts over a set of nodes."""

    def __init__(self) -> None:
        self._counts: dict[str, _Counts] = {}
        self._without_agent = 0

    @classmethod
    def of(cls, nodes: Iterable[ObservedNode]) -> NodeTally:
        tally = cls()
        for node in nodes:
            tally.add(node.name, contribution(node))
        return tally

    def add(self, node: str, part: Contribution, sign: int = 1) -> None:
        if not part.has_agent:
            self._without_agent += sign
            return
        for handler, standing in part.handlers.items():
            counts = self._counts.setdefault(handler, _Counts())
            listed = counts.failures if standing.eligible else counts.ineligible
            counts.eligible += sign if standing.eligible else 0
            counts.ready += sign if standing.ready else 0
            if standing.failure is not None:
                if sign > 0:
                    listed[node] = standing.failure
                else:
                    listed.pop(node, None)
            if counts.empty():
                del self._counts[handler]

    def remove(self, node: str, part: Contribution) -> None:
        self.add(node, part, sign=-1)

    def summary(self, handler: str) -> NodeSummary:
        counts = self._counts.get(handler, _Counts())
        # Failures first, then nodes that cannot run it for a reason one can fix; each by
        # node name.
        first = [
            listed[name]
            for listed in (counts.failures, counts.ineligible)
            for name in heapq.nsmallest(MAX_FAILURES, listed)
        ][:MAX_FAILURES]
        return NodeSummary(
            eligible=counts.eligible,
            ready=counts.ready,
            failed=len(counts.failures),
            failures=first,
            without_agent=self._without_agent,
            ineligible=len(counts.ineligible),
        )

    @staticmethod
    def reports(nodes: Iterable[ObservedNode]) -> dict[str, NodeReport]:
        """The rollout's view of ``nodes`` (those with an agent report)."""
        return {
            node.name: part.report
            for node in nodes
            if (part := contribution(node)).report is not None
        }

    def copy(self) -> NodeTally:
        """A snapshot for one pass (the failures themselves are immutable)."""
        twin = NodeTally()
        twin._without_agent = self._without_agent
        twin._counts = {
            handler: _Counts(c.eligible, c.ready, dict(c.failures), dict(c.ineligible))
            for handler, c in self._counts.items()
        }
        return twin


def summarize(handler: str, nodes: Iterable[ObservedNode]) -> NodeSummary:
    """How the Windows nodes stand for ``handler`` (see ``contribution``)."""
    return NodeTally.of(nodes).summary(handler)


def describe(summary: NodeSummary) -> str:
    parts = [f"{summary.ready}/{summary.eligible} eligible Windows nodes ready"]
    if summary.failed:
        first = ", ".join(f"{f.node}: {f.reason}" for f in summary.failures)
        parts.append(f"{summary.failed} failed ({first})")
    if summary.ineligible:
        reasons = sorted(
            {f.reason for f in summary.failures if f.reason in ACTIONABLE_INELIGIBILITY}
        )
        parts.append(
            f"{summary.ineligible} Windows nodes cannot run it ({', '.join(reasons)}: see failures)"
        )
    if summary.without_agent:
        parts.append(f"{summary.without_agent} Windows nodes report no agent status yet")
    return "; ".join(parts)
