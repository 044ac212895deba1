"""Where the time between waves of a paced rollout goes (``benchmarks/rollout.py``).

A freed slot passes through four hands before the next node applies: the node that finished
reports to its Node (``report``); the operator sees it through its Node watch and writes the
rollout naming the next node (``operator``); the API server sends that rollout to every
agent's watch (``fan-out``); the next node's agent wakes, reads its Node, records its attempt
and starts its preflight (``agent start``). ``Recorder`` wraps each simulated agent's
``Cluster`` to time, in this process, what the agent sent and when its rollout watch
delivered each version; ``breakdown`` sets those times against the hosts' journals.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fleet.paced import Window

from wcow_agent.loop.cluster import NodeObject, PlanObject, RolloutObject
from wcow_agent.simulator.fleet import FleetCluster
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_contract.wire.rollout import parse_rollout


class Recorder:
    """Times of every simulated agent's rollout deliveries and Node reports (time.time())."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.texts: dict[str, str] = {}  # rollout resourceVersion -> rollout.json
        self.first: dict[str, float] = {}  # resourceVersion -> its earliest delivery to anyone
        self.deliveries: dict[str, list[tuple[float, str]]] = {}  # node -> (time, version)
        self.reports: dict[str, list[tuple[float, str]]] = {}  # node -> (patched, status)

    def wrap(self, inner: FleetCluster) -> RecordingCluster:
        return RecordingCluster(inner, self)

    def delivered(self, node: str | None, rollout: RolloutObject) -> None:
        now, version = time.time(), rollout.resource_version or ""
        with self.lock:
            self.first.setdefault(version, now)
            if rollout.text is not None:
                self.texts.setdefault(version, rollout.text)
            if node is not None:
                self.deliveries.setdefault(node, []).append((now, version))

    def reported(self, node: str, status: str) -> None:
        with self.lock:
            self.reports.setdefault(node, []).append((time.time(), status))

    def permitted(self, node: str, plan_hash: str) -> tuple[float, float] | None:
        """(when the first rollout for ``plan_hash`` naming ``node`` was written, taken as its
        earliest delivery to any agent; when this node's own watch delivered it)."""
        with self.lock:
            seen = list(self.deliveries.get(node, []))
        for delivered, version in seen:
            rollout = parse_rollout(self.texts.get(version))
            if rollout and rollout.plan_hash == plan_hash and node in rollout.permitted:
                return self.first[version], delivered
        return None

    def reported_at(self, node: str, plan_hash: str, field: str) -> float | None:
        """When the node's first report with ``field`` (appliedPlanHash, attemptedPlanHash)
        equal to ``plan_hash`` was patched."""
        with self.lock:
            sent = list(self.reports.get(node, []))
        for patched, text in sent:
            if json.loads(text).get(field) == plan_hash:
                return patched
        return None


class RecordingCluster:
    """A simulated agent's ``Cluster``, timing its rollout deliveries and its reports. The
    agent's node is learnt from its first read of its Node (before any permission)."""

    def __init__(self, inner: FleetCluster, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.node: str | None = None

    def get_plan(self, namespace: str) -> PlanObject:
        return self.inner.get_plan(namespace)

    def watch_plan(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[PlanObject]:
        return self.inner.watch_plan(namespace, resource_version, timeout_seconds)

    def get_rollout(self, namespace: str) -> RolloutObject:
        rollout = self.inner.get_rollout(namespace)
        self.recorder.delivered(self.node, rollout)
        return rollout

    def watch_rollout(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[RolloutObject]:
        for rollout in self.inner.watch_rollout(namespace, resource_version, timeout_seconds):
            self.recorder.delivered(self.node, rollout)
            yield rollout

    def get_node(self, name: str) -> NodeObject:
        self.node = name
        return self.inner.get_node(name)

    def patch_node(
        self, name: str, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
    ) -> None:
        self.inner.patch_node(name, labels, annotations)
        status = annotations.get(AGENT_STATUS_ANNOTATION)
        if status:
            self.recorder.reported(name, status)

    def replace_taints(
        self, name: str, current: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
    ) -> None:
        self.inner.replace_taints(name, current, taints)

    def node_event(self, node: NodeObject, reason: str, message: str, warning: bool) -> None:
        self.inner.node_event(node, reason, message, warning)

    def register_node(
        self,
        name: str,
        labels: dict[str, str],
        annotations: dict[str, str],
        taints: list[dict[str, str]],
    ) -> bool:
        return self.inner.register_node(name, labels, annotations, taints)

    def delete_node(self, name: str) -> None:
        self.inner.delete_node(name)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class HandOver:
    """Seconds, one list per step; each list's n-th entry is the n-th freed slot's."""

    total: list[float]  # an apply's last step to the preflight of the next node in its slot
    report: list[float]  # an apply's last step to its agent's report patched
    operator: list[float]  # a report patched to the rollout letting the next node in
    fan_out: list[float]  # that rollout written to the next node's watch delivering it
    start: list[float]  # delivered to the next node's preflight (Node read, attempt recorded)
    opened: float | None = None  # when the rollout letting the first wave in was written


def breakdown(windows: list[Window], recorder: Recorder, plan_hash: str, limit: int) -> HandOver:
    """The hand-overs of one rollout: the n-th apply to start after the first ``limit`` took
    the slot the n-th to finish freed (one rollout write may let several nodes in, so the
    steps are paired by rank, not by node)."""
    ordered = sorted(windows, key=lambda w: w.start)
    first_wave = {w.node for w in ordered[:limit]}
    starts, ends = [w.start for w in ordered], sorted(w.end for w in windows)
    report, patched, written, fan_out, start, opened = [], [], [], [], [], []
    for window in ordered:
        reported = recorder.reported_at(window.node, plan_hash, "appliedPlanHash")
        if reported is not None:
            report.append(reported - window.end)
            patched.append(reported)
        permitted = recorder.permitted(window.node, plan_hash)
        if permitted is not None and window.node in first_wave:
            opened.append(permitted[0])
        if permitted is None or window.node in first_wave:
            continue
        written.append(permitted[0])
        fan_out.append(permitted[1] - permitted[0])
        start.append(window.start - permitted[1])
    return HandOver(
        total=[starts[i + limit] - ends[i] for i in range(len(starts) - limit)],
        report=report,
        operator=[w - r for r, w in zip(sorted(patched), sorted(written), strict=False)],
        fan_out=fan_out,
        start=start,
        opened=min(opened, default=None),
    )


def spread(seconds: list[float]) -> str:
    """``median M s, p95 P s`` of a list of seconds."""
    if not seconds:
        return "no samples"
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered):.2f} s, p95 {p95:.2f} s"
