"""Per-handler node counts from the agents' Node annotations and ready labels."""

from __future__ import annotations

from collections.abc import Sequence
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


def summarize(handler: str, nodes: Sequence[ObservedNode]) -> NodeSummary:
    """How the Windows nodes stand for ``handler``. A node is ready only with the label (the
    scheduler reads the label, so the label decides); eligible when its agent reports the
    handler as anything but NotEligible; failed when it reports Failed or Conflict."""
    eligible = ready = failed = without_agent = 0
    failures: list[NodeFailure] = []
    for node in sorted(nodes, key=lambda n: n.name):
        status = parse_agent_status(node.agent_status)
        if status is None:
            without_agent += 1
            continue
        entry = status.handlers.get(handler)
        if entry is None or entry.state == "NotEligible":
            continue
        eligible += 1
        if node.labels.get(ready_label(handler)) == READY_VALUE:
            ready += 1
        elif entry.state in ("Failed", "Conflict"):
            failed += 1
            if len(failures) < MAX_FAILURES:
                failures.append(
                    NodeFailure(node=node.name, reason=entry.reason, message=entry.message[:1024])
                )
    return NodeSummary(eligible, ready, failed, failures, without_agent)


def describe(summary: NodeSummary) -> str:
    parts = [f"{summary.ready}/{summary.eligible} eligible Windows nodes ready"]
    if summary.failed:
        first = ", ".join(f"{f.node}: {f.reason}" for f in summary.failures)
        parts.append(f"{summary.failed} failed ({first})")
    if summary.without_agent:
        parts.append(f"{summary.without_agent} Windows nodes report no agent status yet")
    return "; ".join(parts)
