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
from wcow_operator.render.runtimeclass import READY_VALUE, ready_label

MAX_FAILURES = 5


@dataclass(frozen=True)
class NodeSummary:
    eligible: int = 0
    ready: int = 0
    failed: int = 0
    failures: list[NodeFailure] = field(default_factory=list)
    without_agent: int = 0  # Windows nodes with no readable agent status


def parse_agent_status(raw: str | None) -> AgentStatus | None:
    if not raw:
        return None
    try:
        return AgentStatus.model_validate_json(raw)
    except ValidationError:
        return None


@dataclass(frozen=True)
class HandlerStanding:
    """Where one node stands for one handler it reports (NotEligible ones are left out)."""

    ready: bool
    failure: NodeFailure | None  # Failed or Conflict, and not labelled ready


@dataclass(frozen=True)
class Contribution:
    has_agent: bool
    handlers: Mapping[str, HandlerStanding]


def contribution(node: ObservedNode) -> Contribution:
    """What ``node`` adds to each handler's counts. Ready only with the label (the scheduler
    reads the label, so the label decides); eligible when its agent reports the handler as
    anything but NotEligible; failed when it reports Failed or Conflict."""
    status = parse_agent_status(node.agent_status)
    if status is None:
        return Contribution(False, {})
    standings: dict[str, HandlerStanding] = {}
    for handler, entry in status.handlers.items():
        if entry.state == "NotEligible":
            continue
        ready = node.labels.get(ready_label(handler)) == READY_VALUE
        failure = None
        if not ready and entry.state in ("Failed", "Conflict"):
            failure = NodeFailure(node=node.name, reason=entry.reason, message=entry.message[:1024])
        standings[handler] = HandlerStanding(ready, failure)
    return Contribution(True, standings)


@dataclass
class _Counts:
    eligible: int = 0
    ready: int = 0
    failures: dict[str, NodeFailure] = field(default_factory=dict)  # by node name


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
            counts.eligible += sign
            counts.ready += sign if standing.ready else 0
            if standing.failure is not None:
                if sign > 0:
                    counts.failures[node] = standing.failure
                else:
                    counts.failures.pop(node, None)
            if counts.eligible == 0:
                del self._counts[handler]

    def remove(self, node: str, part: Contribution) -> None:
        self.add(node, part, sign=-1)

    def summary(self, handler: str) -> NodeSummary:
        counts = self._counts.get(handler, _Counts())
        first = heapq.nsmallest(MAX_FAILURES, counts.failures)  # by node name, stable
        return NodeSummary(
            eligible=counts.eligible,
            ready=counts.ready,
            failed=len(counts.failures),
            failures=[counts.failures[name] for name in first],
            without_agent=self._without_agent,
        )

    def copy(self) -> NodeTally:
        """A snapshot for one pass (the failures themselves are immutable)."""
        twin = NodeTally()
        twin._without_agent = self._without_agent
        twin._counts = {
            handler: _Counts(c.eligible, c.ready, dict(c.failures))
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
    if summary.without_agent:
        parts.append(f"{summary.without_agent} Windows nodes report no agent status yet")
    return "; ".join(parts)
