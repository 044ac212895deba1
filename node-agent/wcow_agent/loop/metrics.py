"""Prometheus metrics of the agent (``--metrics-port``, default 9551, path ``/metrics``)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from wcow_agent.config.state import PAUSE_PHASES
from wcow_agent.cycle.decisions import CycleReport, HandlerOutcome

PAUSE_CHANGE_HELP = (
    "1 for the phase of a pause image change this agent made that holds its readiness false: "
    "applying, proving, failed (rolled back; until the flag changes); all 0 when none is."
)
CANARY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.applies = Counter(
            "wcow_agent_applies",
            "Reconcile cycles by result: unchanged, applied, rolled_back, rejected, "
            "refused (config.toml cannot be edited), failed, waiting (for rollout permission).",
            ["result"],
            registry=r,
        )
        self.restarts = Counter(
            "wcow_agent_containerd_restarts",
            "containerd restarts by reason: apply, rollback, recovery, uninstall.",
            ["reason"],
            registry=r,
        )
        self.rollbacks = Counter(
            "wcow_agent_rollbacks",
            "Times containerd did not come up with a new config.toml and the old was restored.",
            registry=r,
        )
        self.drift_repairs = Counter(
            "wcow_agent_drift_repairs",
            "Handler tables written again after something else removed or changed them.",
            registry=r,
        )
        self.config_rewrites = Counter(
            "wcow_agent_config_rewrites",
            "Files of containerd's configuration the node rewrote behind the agent (a "
            "reimage, its installer, a hand edit) that the agent wrote its part into again.",
            registry=r,
        )
        self._handler_metrics(r)
        self.plan_errors = Counter(
            "wcow_agent_plan_errors",
            "Plans that could not be used (missing, not JSON, hash mismatch, schema).",
            registry=r,
        )
        self.cluster_errors = Counter(
            "wcow_agent_cluster_errors",
            "Failed calls to the Kubernetes API (reading the plan, patching the Node).",
            registry=r,
        )
        self.rollout_waiting = Gauge(
            "wcow_agent_rollout_waiting",
            "1 while the node keeps its config.toml because the current (paced) plan waits "
            "for the rollout's permission, else 0.",
            registry=r,
        )
        self.pause_change = Gauge(
            "wcow_agent_pause_image_change", PAUSE_CHANGE_HELP, ["phase"], registry=r
        )
        self._handlers: set[str] = set()
        self._states: set[tuple[str, str, str]] = set()

    def _handler_metrics(self, r: CollectorRegistry) -> None:
        self.canary_duration = Histogram(
            "wcow_agent_canary_duration_seconds",
            "Canary duration by handler and result (passed, failed).",
            ["handler", "result"],
            buckets=CANARY_BUCKETS,
            registry=r,
        )
        self.handler_ready = Gauge(
            "wcow_agent_handler_ready",
            "1 when the handler is applied and its canary passed on this node, else 0.",
            ["handler"],
            registry=r,
        )
        # handler_ready is 0 for a handler this host cannot run as for one that failed; the
        # state tells them apart, so an alert can skip NotEligible handlers and the
        # GuestBuildUnsupported ones of another node pool (charts/.../prometheus-rules.yaml).
        self.handler_state = Gauge(
            "wcow_agent_handler_state",
            "1 for each handler's current state (Ready, Failed, Pending, NotEligible, "
            "Conflict) and reason on this node, as in the node's agent-status annotation.",
            ["handler", "state", "reason"],
            registry=r,
        )

    def record(self, report: CycleReport) -> None:
        self.applies.labels(report.result).inc()
        for reason in report.restarts:
            self.restarts.labels(reason).inc()
        self.rollbacks.inc(sum(1 for reason in report.restarts if reason == "rollback"))
        self.drift_repairs.inc(len(report.drift_repaired))
        self.config_rewrites.inc(len(report.rewritten))
        for canary in report.canaries:
            result = "passed" if canary.passed else "failed"
            self.canary_duration.labels(canary.handler, result).observe(canary.duration_seconds)
        if report.handlers is not None:
            self.rollout_waiting.set(1 if report.waiting is not None else 0)
            self.set_ready({h: o.state == "Ready" for h, o in report.handlers.items()})
            self.set_states(report.handlers)

    def set_pause_change(self, phase: str | None) -> None:
        for name in PAUSE_PHASES:
            self.pause_change.labels(name).set(1 if name == phase else 0)

    def set_ready(self, handlers: Mapping[str, bool]) -> None:
        for gone in self._handlers - set(handlers):
            self.handler_ready.remove(gone)
        for handler, ready in handlers.items():
            self.handler_ready.labels(handler).set(1 if ready else 0)
        self._handlers = set(handlers)

    def set_states(self, handlers: Mapping[str, HandlerOutcome]) -> None:
        states: set[tuple[str, str, str]] = {(h, o.state, o.reason) for h, o in handlers.items()}
        for gone in self._states - states:
            self.handler_state.remove(*gone)
        for labels in states:
            self.handler_state.labels(*labels).set(1)
        self._states = states
