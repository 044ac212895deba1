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

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from wcow_agent.cycle.decisions import CycleReport
from wcow_agent.loop.cluster import Cluster, ClusterError, NodeObject

log = logging.getLogger("wcow_agent")


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


def lift_startup_taint(
    cluster: Cluster, node: NodeObject, report: CycleReport, key: str | None
) -> bool:
    """Remove the startup taint ``key`` from the Node once every handler has a verdict;
    True when the API server refused (the next cycle tries again)."""
    kept = without_taint(node.taints, key) if key else None
    if kept is None or not judged_every_handler(report):
        return False
    try:
        cluster.replace_taints(node.name, node.taints, kept)
    except ClusterError as error:
        log.warning("cannot remove the startup taint %s from %s: %s", key, node.name, error)
        return True
    log.info("every handler has a verdict: removed the startup taint %s", key)
    try:
        cluster.node_event(
            node, "StartupTaintRemoved", f"every handler has a verdict: removed {key}", False
        )
    except ClusterError as error:
        log.debug("event StartupTaintRemoved not recorded: %s", error)
    return False
