"""The drainer: what a pass decided about drains (``reconcile.drain.DrainWork``), done
through the API, and what it found, remembered for the next pass.

A draining node is cordoned (``spec.unschedulable`` and the annotation that says the operator
did it), unless it is unschedulable already by someone else's hand: then it is left as it
is and never uncordoned by us. With Evict, the changed classes' pods on it are evicted
through the Eviction API (a PodDisruptionBudget's refusal is asked again next time) and the
node is drained once none of them is left. Every step is idempotent, so a new leader that
finds a node draining simply does it again; nothing lives here that the cluster does not also
say, except the last reason a node is not drained yet (for the DrainTimeout message).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wcow_operator.controller.cluster_api import ApiError, ClusterApi
from wcow_operator.controller.metrics import Metrics
from wcow_operator.reconcile.drain import (
    CORDONED_BY,
    CORDONED_BY_VALUE,
    DrainOrder,
    DrainProgress,
    DrainWork,
    blocking,
    pod_name,
    pods_to_evict,
    waiting_for,
)

log = logging.getLogger(__name__)
POLL_SECONDS = 2.0  # while a node drains: how soon to look at its pods again


class Drainer:
    def __init__(
        self,
        api: ClusterApi,
        metrics: Metrics,
        wrote_node: Callable[[dict[str, Any]], None],
        post_event: Callable[[str, str, str, str], None],
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.wrote_node = wrote_node  # the API server's answer, into the cache
        self.post_event = post_event  # (node, type, reason, message)
        self.progress: dict[str, DrainProgress] = {}
        self._began: dict[str, float] = {}

    def run(self, work: DrainWork, pool: ThreadPoolExecutor) -> float | None:
        """Drain and uncordon as decided. When the next pass should come: at once when a
        drain is done (that node may be permitted), in ``POLL_SECONDS`` while one is under
        way (pods leave on their own time), None when nothing drains."""
        for node in set(self.progress) - set(work.drain):
            self._finished(node)
        for node in work.drain:
            self._began.setdefault(node, time.monotonic())
        steps = [(self._drain, n) for n in work.drain] + [
            (self._uncordon, n) for n in work.uncordon
        ]
        results = list(pool.map(lambda step: self._safely(step[0], step[1], work.order), steps))
        for node, found in zip(work.drain, results, strict=False):
            if found is not None:
                self.progress[node] = found
        if any(self.progress[n].done for n in work.drain if n in self.progress):
            return 0.0
        return POLL_SECONDS if work.drain else None

    def _safely(
        self,
        step: Callable[[str, DrainOrder], DrainProgress | None],
        node: str,
        order: DrainOrder,
    ) -> DrainProgress | None:
        try:
            return step(node, order)
        except ApiError as error:  # tried again next pass; the timeout bounds it
            log.warning("drain: %s %s: %s", step.__name__.strip("_"), node, error)
            return DrainProgress(done=False, waiting_for=f"the API refused: {error}"[:512])

    def _finished(self, node: str) -> None:
        seen = self.progress.pop(node)
        began = self._began.pop(node, None)
        result = "drained" if seen.done else "stopped"
        self.metrics.drains.labels(result=result).inc()
        if began is not None:
            self.metrics.drain_duration.observe(time.monotonic() - began)

    def _drain(self, node: str, order: DrainOrder) -> DrainProgress:
        body = self.api.get_node(node)
        metadata = body.get("metadata") or {}
        ours = (metadata.get("annotations") or {}).get(CORDONED_BY) == CORDONED_BY_VALUE
        if not (body.get("spec") or {}).get("unschedulable"):
            patched = self.api.patch_node(
                node,
                {
                    "metadata": {
                        "resourceVersion": metadata.get("resourceVersion"),
                        "annotations": {CORDONED_BY: CORDONED_BY_VALUE},
                    },
                    "spec": {"unschedulable": True},
                },
            )
            self.wrote_node(patched)
            self.post_event(node, "Normal", "Cordoned", "cordoned before its containerd restarts")
        elif not ours:
            log.info("drain: %s is unschedulable already (not by us): left as it is", node)
        if order.mode != "Evict":
            return DrainProgress(done=True)
        return self._evict(node, order)

    def _evict(self, node: str, order: DrainOrder) -> DrainProgress:
        left = pods_to_evict(self.api.list_node_pods(node), order)
        refusals: list[str] = []
        for pod in left:
            metadata = pod.get("metadata") or {}
            if metadata.get("deletionTimestamp"):
                continue  # evicted already: waiting for it to end
            refused = self.api.evict_pod(str(metadata.get("namespace")), str(metadata.get("name")))
            if refused is not None:
                refusals.append(f"{pod_name(pod)}: {refused}")
            else:
                self.post_event(
                    node, "Normal", "Evicted", f"evicted {pod_name(pod)} before the restart"
                )
        if not left:
            return DrainProgress(done=True)
        return DrainProgress(
            done=False,
            waiting_for=waiting_for([pod_name(p) for p in left], refusals),
            blocking=blocking(left),
        )

    def _uncordon(self, node: str, _order: DrainOrder) -> None:
        try:
            body = self.api.get_node(node)
        except ApiError as error:
            if error.status == 404:
                return  # gone: nothing to undo
            raise
        metadata = body.get("metadata") or {}
        if (metadata.get("annotations") or {}).get(CORDONED_BY) != CORDONED_BY_VALUE:
            return  # not ours (any more): never touched
        patched = self.api.patch_node(
            node,
            {
                "metadata": {
                    "resourceVersion": metadata.get("resourceVersion"),
                    "annotations": {CORDONED_BY: None},
                },
                "spec": {"unschedulable": None},
            },
        )
        self.wrote_node(patched)
        self.post_event(node, "Normal", "Uncordoned", "uncordoned after its change")
