"""The watches that fill the controller's cache, one thread each."""

from __future__ import annotations

import functools

from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.informer import run_informer, watched_collections
from wcow_operator.controller.metrics import Metrics
from wcow_operator.k8s.kubernetes_api import KubernetesApi
from wcow_support.supervisor import Supervisor


def start_informers(
    supervisor: Supervisor, api: KubernetesApi, cache: ClusterCache, namespace: str,
    metrics: Metrics,
) -> None:  # fmt: skip
    """Every replica keeps its cache warm, so a new leader plans from memory at once. A
    watch blocked in its read is not waited for at shutdown."""
    for watched in watched_collections(namespace):
        informer = functools.partial(
            run_informer, api, watched, cache, supervisor.stopping,
            on_list=lambda kind: metrics.watch_lists.labels(kind=kind).inc(),
        )  # fmt: skip
        supervisor.start(f"watch-{watched.kind}", informer)
