"""Prometheus metrics of the operator (a registry of its own, so tests can make many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._passes(self.registry)
        self._plan_and_rollout(self.registry)

    def _passes(self, r: CollectorRegistry) -> None:
        self.reconciles = Counter(
            "wcow_reconcile_total", "Reconcile passes by result", ["result"], registry=r
        )
        self.duration = Histogram(
            "wcow_reconcile_duration_seconds",
            "Duration of a reconcile pass",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.profiles = Gauge(
            "wcow_profiles",
            "Profiles by condition and status",
            ["condition", "status"],
            registry=r,
        )
        self.runtime_classes = Gauge(
            "wcow_runtimeclasses_managed", "RuntimeClasses owned by profiles", registry=r
        )
        self.api_errors = Counter(
            "wcow_api_errors_total",
            "Kubernetes API errors (before retries)",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_writes = Counter(
            "wcow_api_writes_total",
            "Kubernetes API writes that succeeded",
            ["verb", "resource"],
            registry=r,
        )

    def _plan_and_rollout(self, r: CollectorRegistry) -> None:
        self.plan_bytes = Gauge(
            "wcow_plan_size_bytes", "Size of the plan in the ConfigMap", registry=r
        )
        self.plan_limit_ratio = Gauge(
            "wcow_plan_size_ratio", "Plan size as a fraction of the plan size limit", registry=r
        )
        self.plan_last_write = Gauge(
            "wcow_plan_last_write_timestamp_seconds",
            "When the plan was last written",
            registry=r,
        )
        self.plan_handlers = Gauge("wcow_plan_handlers", "Handlers in the plan", registry=r)
        self.leader = Gauge("wcow_leader", "1 while this replica reconciles", registry=r)
        self.rollout_nodes = Gauge(
            "wcow_rollout_nodes",
            "Windows nodes by where they stand in the current plan's rollout",
            ["state"],
            registry=r,
        )
        self.rollout_halted = Gauge(
            "wcow_rollout_halted", "1 while the current rollout is halted by a failure", registry=r
        )
        self.rollout_held = Gauge(
            "wcow_rollout_held",
            "Profiles whose change failed on a node and is held back (the others roll out)",
            registry=r,
        )
        self.drains = Counter(
            "wcow_drains_total",
            "Node drains before a restart, by result: drained (the node was let in) or "
            "stopped (DrainTimeout, a halt or a new plan ended it first)",
            ["result"],
            registry=r,
        )
        self.drain_duration = Histogram(
            "wcow_drain_duration_seconds",
            "From a node's drain beginning to its end (drained or stopped)",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.watch_lists = Counter(
            "wcow_watch_lists_total",
            "Full lists of a watched collection (on start, and when its watch expired)",
            ["kind"],
            registry=r,
        )
