"""The startup taint: how a new node keeps pods away until its agent has judged every handler.

A node pool registers its Windows nodes with a NoSchedule taint (``STARTUP_TAINT`` by
default; kubelet ``--register-with-taints`` or a NodePool's ``startupTaints``). The agent
removes it, from its own Node only, once one cycle has a verdict for every handler of the
plan (Ready, Failed, NotEligible...; none Pending): from then on the ready labels say which
classes may land. cluster-autoscaler counts a node with a taint under
``startup-taint.cluster-autoscaler.kubernetes.io/`` as still starting (its FAQ.md, "startup
taints"), so a pending pod does not make it scale up a second node meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wcow_agent.agent import CycleReport


def judged_every_handler(report: CycleReport) -> bool:
    """Whether this cycle read the host and the plan and left no handler Pending (a paced
    change still waiting for permission leaves its handlers Pending)."""
    if report.facts is None or report.handlers is None or report.result == "waiting":
        return False
    return all(outcome.state != "Pending" for outcome in report.handlers.values())


def without_taint(taints: Sequence[Mapping[str, Any]], key: str) -> list[Mapping[str, Any]] | None:
    """The Node's taints with every taint of ``key`` removed; None when it has none."""
    kept = [taint for taint in taints if taint.get("key") != key]
    return kept if len(kept) != len(taints) else None
