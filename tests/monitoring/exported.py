"""The metric names the operator (with its webhook) and the agents export, as Prometheus
stores them, taken from their own registries: what the alerts and the dashboard may use."""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client import CollectorRegistry

from wcow_agent.loop.metrics import Metrics as AgentMetrics
from wcow_operator.controller.metrics import Metrics as OperatorMetrics
from wcow_operator.webhook.metrics import AdmissionMetrics

_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
}
# A metric name in PromQL: a word starting with wcow_ (label names and values never do here).
_NAME = re.compile(r"\bwcow_[a-z0-9_]+\b")


def exported() -> frozenset[str]:
    operator = OperatorMetrics()
    AdmissionMetrics(operator.registry)
    registries: list[CollectorRegistry] = [operator.registry, AgentMetrics().registry]
    return frozenset(
        metric.name + suffix
        for registry in registries
        for metric in registry.collect()
        for suffix in _SUFFIXES[metric.type]
    )


def used(expressions: Iterable[str]) -> set[str]:
    return {name for expr in expressions for name in _NAME.findall(expr)}
