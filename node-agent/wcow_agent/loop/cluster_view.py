"""The plan and rollout ConfigMaps as the agent last saw them.

Two watch threads keep them current and wake the loop only when what matters to this node
changed; the loop reads them once per cycle (reading them from the API server when no watch
has delivered them yet).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from wcow_agent.cycle.rollout_verdict import Permission
from wcow_agent.loop.cluster import (
    Cluster,
    ClusterError,
    PlanObject,
    RolloutObject,
    WatchExpiredError,
)
from wcow_agent.loop.metrics import Metrics
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.wire.plan import PLAN_CONFIGMAP, PLAN_KEY, Plan
from wcow_support.retry import Backoff

log = logging.getLogger("wcow_agent")

Watched = TypeVar("Watched", PlanObject, RolloutObject)

WATCH_TIMEOUT_SECONDS = 300
# A failing watch is reopened after 1 s, doubling to 60 s; a good watch starts over. The
# jitter keeps a fleet of agents from coming back to a restarted API server together.
WATCH_BACKOFF = Backoff(initial=1.0, maximum=60.0, jitter=0.2)
# A paced plan this node is not let in for yet asks nothing urgent of it (its cycle only
# records that it waits), so that cycle is spread over this window by node name: a plan
# write does not send every agent of the fleet to the API server at once, and the nodes the
# rollout lets in (woken at once by the rollout) are not queued behind the others.
PACED_WAKE_SPREAD_SECONDS = 2.0


def paced_wake_delay(node: str, spread: float = PACED_WAKE_SPREAD_SECONDS) -> float:
    """This node's place in the spread window: the same for every plan, uniform over the
    fleet's names."""
    digest = hashlib.sha256(node.encode("utf-8")).digest()
    return spread * int.from_bytes(digest[:4], "big") / 2**32


@dataclass(frozen=True)
class RunOptions:
    node_name: str
    namespace: str = "wcow-system"
    resync_seconds: float = 300.0
    drift_check_seconds: float = 30.0
    retry_seconds: float = 30.0
    startup_taint: str | None = None
    """The taint (key) this agent removes from its Node once every handler has a verdict
    (``startup_taint``); None: none."""


class ClusterView:
    def __init__(
        self,
        cluster: Cluster,
        options: RunOptions,
        metrics: Metrics,
        stop: threading.Event,
        wake: threading.Event,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.options = options
        self.metrics = metrics
        self.stop = stop
        self.wake = wake
        self.clock = clock
        self._lock = threading.Lock()
        self._wake_at: float | None = None  # a deferred wake (``clock`` time): see _wake
        self._plan: PlanObject | None = None
        self._rollout: RolloutObject | None = None
        self._rollout_view: tuple[object, ...] | None = None
        self._checked: tuple[str, Plan | None, str | None] | None = None
        """The last plan text checked (``load_plan``) and what came of it: the same text
        again (a resync, a rollout change) is not checked again; any other text is."""

    def on_plan(self, plan: PlanObject) -> None:
        """Wake the loop when the plan changed (see ``_wake``)."""
        with self._lock:
            same = self._plan is not None and (
                self._plan.exists,
                self._plan.text,
                self._plan.uninstall,
            ) == (plan.exists, plan.text, plan.uninstall)
            self._plan = plan
        if not same:
            self._wake()

    def on_rollout(self, rollout: RolloutObject) -> None:
        """Wake the loop only when what the rollout says about this node changed: another
        node let in is no reason for a cycle here (see ``_wake``)."""
        view = Permission.of(True, rollout.exists, rollout.text, self.options.namespace).view(
            self.options.node_name
        )
        with self._lock:
            same = self._rollout_view == view
            self._rollout = rollout
            self._rollout_view = view
        if not same:
            self._wake()

    def _wake(self) -> None:
        """A cycle at once; or, when the plan is paced and the rollout does not let this
        node in for it, after this node's place in the spread window: it can only record
        that it waits, and the rollout that lets it in wakes it at once."""
        with self._lock:
            plan, view = self._plan, self._rollout_view
            waits = (
                plan is not None
                and plan.paced
                and plan.exists
                and plan.uninstall is None
                and plan.announced_hash is not None
                and view is not None
                and len(view) == 4
                # not let in for this plan (a hint only: wrong, it moves a wake by seconds)
                and not (view[1] == plan.announced_hash and view[2] is not None)
            )
            if waits:
                at = self.clock() + paced_wake_delay(self.options.node_name)
                self._wake_at = at if self._wake_at is None else min(self._wake_at, at)
        if not waits:
            self.wake.set()

    def deferred_wake(self) -> float | None:
        """When a deferred wake is due (``clock`` time), None when none is pending."""
        with self._lock:
            return self._wake_at

    def cycle_starts(self) -> None:
        """A cycle reads the plan as it is now: a deferred wake has nothing left to do."""
        with self._lock:
            self._wake_at = None

    def watch_plan_forever(self) -> None:
        """The plan ConfigMap; runs in its own thread until ``stop``."""
        self._follow("plan", self.cluster.get_plan, self.cluster.watch_plan, self.on_plan)

    def watch_rollout_forever(self) -> None:
        """The rollout ConfigMap; runs in its own thread until ``stop``."""
        self._follow(
            "rollout", self.cluster.get_rollout, self.cluster.watch_rollout, self.on_rollout
        )

    def _follow(
        self,
        what: str,
        get: Callable[[str], Watched],
        watch: Callable[[str, str | None, int], Iterator[Watched]],
        on: Callable[[Watched], None],
    ) -> None:
        """List, then watch from that resourceVersion; list again on 410 or errors."""
        delays = WATCH_BACKOFF.delays()
        resource_version: str | None = None
        while not self.stop.is_set():
            try:
                if resource_version is None:
                    current = get(self.options.namespace)
                    on(current)
                    resource_version = current.resource_version or ""
                for current in watch(
                    self.options.namespace, resource_version or None, WATCH_TIMEOUT_SECONDS
                ):
                    on(current)
                    resource_version = current.resource_version or resource_version
                    if self.stop.is_set():
                        return
                delays = WATCH_BACKOFF.delays()
            except WatchExpiredError:
                resource_version = None
            except ClusterError as error:
                self.metrics.cluster_errors.inc()
                delay = next(delays)
                log.warning("%s watch: %s (retrying in %.0f s)", what, error, delay)
                resource_version = None
                self.stop.wait(delay)
            except Exception:  # a bug must not end the thread: the node would stop following
                delay = next(delays)
                log.exception("%s watch failed unexpectedly (retrying in %.0f s)", what, delay)
                resource_version = None
                self.stop.wait(delay)

    def permission(self) -> Permission:
        """Whether the current plan is paced, and the rollout as last seen (read once if
        the watch has not delivered it yet). Unreadable: nobody is let in."""
        with self._lock:
            plan, rollout = self._plan, self._rollout
        paced = plan is not None and plan.paced
        if not paced:
            return Permission(paced=False)
        if rollout is None:
            try:
                rollout = self.cluster.get_rollout(self.options.namespace)
            except ClusterError as error:
                self.metrics.cluster_errors.inc()
                return Permission(True, None, f"cannot read the rollout: {error}")
            self.on_rollout(rollout)
        return Permission.of(True, rollout.exists, rollout.text, self.options.namespace)

    def uninstall_requested(self) -> str | None:
        """The plan's uninstall signal as last seen (None: none, or not seen yet)."""
        with self._lock:
            return self._plan.uninstall if self._plan is not None else None

    def plan(self) -> tuple[Plan | None, str | None]:
        """(the plan, why there is none)."""
        with self._lock:
            plan = self._plan
        if plan is None:
            try:
                plan = self.cluster.get_plan(self.options.namespace)
            except ClusterError as error:
                self.metrics.cluster_errors.inc()
                return None, f"cannot read the plan: {error}"
            self.on_plan(plan)
        source = f"ConfigMap {self.options.namespace}/{PLAN_CONFIGMAP}"
        if not plan.exists:
            return None, f"{source} does not exist (is wcow-operator running?)"
        if plan.text is None:
            return None, f"{source} has no key {PLAN_KEY}"
        checked = self._checked
        if checked is not None and checked[0] == plan.text:
            return checked[1], checked[2]
        try:
            result: tuple[Plan | None, str | None] = load_plan(plan.text, source), None
        except PlanError as error:
            result = None, str(error)
        self._checked = (plan.text, *result)
        return result
