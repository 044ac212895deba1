"""``wcow-agent run``: watch the plan, reconcile one cycle at a time, report to the Node.

Threads: the main thread runs every reconcile (so applies never overlap); two watch threads
follow the plan and the rollout ConfigMaps and only wake the main thread; the metrics and
health servers answer on their own. A cycle runs when the plan changes (a paced plan that
does not let this node in yet: within ``cluster_view.PACED_WAKE_SPREAD_SECONDS``), when the rollout
changes what it says about this node (let in, for which plan, halted), every ``resync``
seconds, when config.toml changed on disk (checked every ``drift_check`` seconds: something
else rewrote it), and sooner after a cycle that asked to be retried.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.state import StateJournal, load_state
from wcow_agent.cycle import pause_change
from wcow_agent.cycle.canary import CLEANUP_TIMEOUT, CanarySpec
from wcow_agent.cycle.decisions import (
    CycleReport,
    HandlerOutcome,
    NodeLabels,
    build_status,
    capability_label_changes,
    guest_label_changes,
    label_changes,
    ready_handlers,
)
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.pause_image import PULL_TIMEOUT, STATUS_TIMEOUT
from wcow_agent.cycle.rollout_gate import Pace
from wcow_agent.loop.cluster import (
    CANARY_REQUEST_ANNOTATION,
    Cluster,
    ClusterError,
    NodeObject,
    PlanObject,
    RolloutObject,
)
from wcow_agent.loop.cluster_view import ClusterView, RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_agent.loop.node_cleanup import let_go
from wcow_agent.loop.startup_taint import lift_startup_taint
from wcow_contract.wire.agent_status import (
    AGENT_STATUS_ANNOTATION,
    AgentStatus,
    dump_agent_status,
    parse_agent_status,
)
from wcow_contract.wire.plan import Plan
from wcow_support.health import StepHealth

log = logging.getLogger("wcow_agent")

WAIT_SLICE_SECONDS = 1.0


def fingerprint(files: Sequence[Path]) -> str | None:
    """The files of containerd's configuration the agent keeps (config.toml first, then
    its drop-in or template), hashed: a change by someone else wakes a cycle."""
    parts = []
    for path in files:
        try:
            parts.append(text_hash(path.read_bytes().decode("latin-1")))
        except OSError:
            parts.append("none")
    if not parts or parts[0] == "none":
        return None
    return parts[0] if len(parts) == 1 else text_hash("\n".join(parts))


def selects_nodes(plan: Plan) -> bool:
    return any(entry.node_selector for entry in plan.handlers.values())


def unjudged(plan: Plan, node_name: str) -> CycleReport:
    """A cycle that cannot read the Node, with a plan whose profiles select nodes by label:
    config.toml, labels and status stay as they are; tried again soon."""
    report = CycleReport(plan_hash=plan.hash, result="failed", requeue=True)
    report.event(
        "NodeUnreadable",
        f"cannot read Node {node_name}: the plan's nodeSelectors cannot be judged; "
        "config.toml is left as it is until the Node can be read",
        warning=True,
    )
    log.warning("%s", report.events[0][1])
    return report


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AgentLoop:
    def __init__(
        self,
        agent: NodeAgent,
        cluster: Cluster,
        options: RunOptions,
        *,
        metrics: Metrics,
        health: StepHealth,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], str] = utc_now,
    ) -> None:
        self.agent = agent
        self.cluster = cluster
        self.options = options
        self.metrics = metrics
        self.health = health
        self.stop = stop
        self.clock = clock
        self.now = now
        self.wake = threading.Event()
        self.view = ClusterView(cluster, options, metrics, stop, self.wake, clock=clock)
        self._last_plan_error: str | None = None
        self._status: AgentStatus | None = None
        self._config_fingerprint: str | None = None
        self._last_events: set[tuple[str, str, bool]] = set()
        self.ports: dict[str, int] = {}  # where the metrics and health servers listen
        self.pause_hold: str | None = None
        """Why /readyz is false while a pause image change is unproven or failed."""
        self.uninstalled = False
        """This node was cleaned on the plan's uninstall signal: idle until a plan with
        handlers and no signal comes (``helm uninstall`` deletes this agent meanwhile)."""

    # -- the plan and the rollout (``cluster_view.ClusterView``) --------------------------

    def on_plan(self, plan: PlanObject) -> None:
        self.view.on_plan(plan)

    def on_rollout(self, rollout: RolloutObject) -> None:
        self.view.on_rollout(rollout)

    def watch_forever(self) -> None:
        self.view.watch_plan_forever()

    # -- one cycle -------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        plan, plan_error = self.view.plan()
        signal = self.view.uninstall_requested()
        if signal is not None or (self.uninstalled and (plan is None or not plan.handlers)):
            return self._uninstall(signal)
        self.uninstalled = False
        if plan_error and plan_error != self._last_plan_error:
            self.metrics.plan_errors.inc()
            log.warning("%s; keeping config.toml and the Node's labels as they are", plan_error)
        node = self._get_node()
        previous = self._status
        if node is not None:
            previous = parse_agent_status(node.annotations.get(AGENT_STATUS_ANNOTATION)) or previous
        request = node.annotations.get(CANARY_REQUEST_ANNOTATION) if node else None
        state, _ = load_state(self.agent.paths.state)
        force = bool(request) and request != state.canary_request
        if force:
            log.info("canary requested on demand (%s=%s)", CANARY_REQUEST_ANNOTATION, request)

        if node is None and plan is not None and selects_nodes(plan):
            # Which classes this node may apply depends on its labels: judged blind, a
            # class would be added or taken away for nothing. Nothing changes until then.
            report = unjudged(plan, self.options.node_name)
            self.metrics.record(report)
            self.health.idle(ready=False, error=report.events[0][1])
            return report
        self.health.busy(self._cycle_bound(plan))
        pace = Pace(
            self.view.permission(),
            self.options.node_name,
            lambda notice: self._announce(node, previous, notice),
        )
        labels = NodeLabels.of(node.labels, previous) if node is not None else None
        report = self.agent.reconcile(plan, force_canary=force, pace=pace, node=labels)
        if force and not self.stop.is_set():
            journal, _ = StateJournal.load(self.agent.paths.state)
            journal.canary_request_served(request)
        self.metrics.record(report)
        self._log(report)
        if plan_error and plan_error != self._last_plan_error:
            report.event("PlanUnusable", plan_error, warning=True)
        self._last_plan_error = plan_error
        error = self._report(node, report, previous)
        if error is not None:
            # The Node could not be read or written (the API server restarting): try again
            # soon, not at the next resync, or the operator waits minutes for this node's
            # word that it applied and the rollout stalls.
            report.requeue = True
        self._hold_for_pause_change()
        self.health.idle(ready=error is None and report.facts is not None, error=error or "")
        return report

    def _uninstall(self, signal: str | None) -> CycleReport:
        """On the plan's ``runtime.wcow.dev/uninstall``: clean the host and the Node, write
        nothing else. After that, and without a signal, idle: writes nothing at all."""
        report = CycleReport(result="uninstalled")
        if signal is None:
            return report
        self.health.busy(3 * self.agent.timeouts.restart + 120.0)
        try:
            error = let_go(self.agent.uninstall, self.cluster, self.options.node_name)
        except ClusterError as failure:
            self.metrics.cluster_errors.inc()
            error = f"cannot clean Node {self.options.node_name}: {failure}"
            log.warning("%s", error)
        if error is None and not self.uninstalled:
            log.info("uninstalled on the plan's signal (%s): the node is clean", signal)
        self.uninstalled = error is None
        self._status, self._last_events = None, set()
        report.requeue = error is not None
        self.health.idle(ready=error is None, error=error or "")
        return report

    def readiness(self) -> tuple[bool, str]:
        """/readyz: the loop's readiness, held false while a pause image change this agent
        made is not proven (or failed): the DaemonSet's rolling update waits on it."""
        ready, text = self.health.readiness()
        hold = self.pause_hold
        if ready and hold is not None:
            return False, hold
        return ready, text

    def _hold_for_pause_change(self) -> None:
        state, _ = load_state(self.agent.paths.state)
        record = state.pause_change
        hold = pause_change.readiness_hold(state)
        if hold != self.pause_hold:
            (log.warning if record and record.phase == "failed" else log.info)(
                "readiness: %s", hold or "no pause image change pending"
            )
        self.pause_hold = hold
        self.metrics.set_pause_change(record.phase if record is not None else None)

    def _cycle_bound(self, plan: Plan | None) -> float:
        """How long a cycle may take before /healthz calls it stuck."""
        restarts = 3 * self.agent.timeouts.restart
        canaries = sum(
            CanarySpec.from_plan(h, entry).timeout_seconds + 2 * CLEANUP_TIMEOUT
            for h, entry in (plan.handlers if plan is not None else {}).items()
        )
        # Reading the pause image's build, before a change of it and after.
        pause = 2 * (PULL_TIMEOUT + 2 * STATUS_TIMEOUT)
        return restarts + canaries + pause + 120.0

    def _get_node(self) -> NodeObject | None:
        try:
            return self.cluster.get_node(self.options.node_name)
        except ClusterError as error:
            self.metrics.cluster_errors.inc()
            log.warning("cannot read Node %s: %s", self.options.node_name, error)
            return None

    def _announce(
        self, node: NodeObject | None, previous: AgentStatus | None, notice: CycleReport
    ) -> bool:
        """Write ``attemptedPlanHash`` to the Node before config.toml changes, so the
        operator counts this node unavailable from now on. False when it could not."""
        if node is None:
            return False
        # The handlers the attempt changes say so; the others keep what they said.
        kept = {
            name: HandlerOutcome(
                entry.state,
                entry.reason,
                entry.message,
                entry.profile_generation,
                entry.canary_duration_seconds,
            )
            for name, entry in (previous.handlers if previous is not None else {}).items()
        }
        notice = replace(notice, handlers={**kept, **(notice.handlers or {})})
        status = build_status(notice, previous, self.now())
        if status is None:
            return False
        status = status.model_copy(update={"waiting": None})
        text = dump_agent_status(status)
        if node.annotations.get(AGENT_STATUS_ANNOTATION) == text:
            return True
        try:
            self.cluster.patch_node(node.name, {}, {AGENT_STATUS_ANNOTATION: text})
        except ClusterError as error:
            self.metrics.cluster_errors.inc()
            log.warning("cannot record the attempt on Node %s: %s", node.name, error)
            return False
        self._status = status
        return True

    def _report(
        self, node: NodeObject | None, report: CycleReport, previous: AgentStatus | None
    ) -> str | None:
        """Labels and status annotation of this Node: only what changed, in one patch."""
        status = build_status(report, previous, self.now())
        if node is None:
            return "the Node could not be read; labels and status not updated"
        ready = ready_handlers(report)
        labels = label_changes(node.labels, ready) if ready is not None else {}
        reported = previous.guest_builds if previous is not None else None
        labels.update(guest_label_changes(node.labels, report.guest_builds, reported))
        labels.update(capability_label_changes(node.labels, report.facts))
        annotations: dict[str, str | None] = {}
        if status is not None:
            text = dump_agent_status(status)
            if node.annotations.get(AGENT_STATUS_ANNOTATION) != text:
                annotations[AGENT_STATUS_ANNOTATION] = text
        try:
            if labels or annotations:
                self.cluster.patch_node(node.name, labels, annotations)
            self._status = status or self._status
        except ClusterError as error:
            self.metrics.cluster_errors.inc()
            log.warning("cannot update Node %s: %s", node.name, error)
            return str(error)
        # The same event again (a canary failing at every resync) is not written again.
        events = set(report.events)
        for reason, message, warning in report.events:
            if (reason, message, warning) in self._last_events:
                continue
            try:
                self.cluster.node_event(node, reason, message, warning)
            except ClusterError as error:
                log.debug("event %s not recorded: %s", reason, error)
        self._last_events = events
        if lift_startup_taint(self.cluster, node, report, self.options.startup_taint):
            self.metrics.cluster_errors.inc()
        return None

    def _log(self, report: CycleReport) -> None:
        for reason, message, warning in report.events:
            (log.warning if warning else log.info)("%s: %s", reason, message)
        if report.handlers is not None:
            summary = ", ".join(
                f"{h}={o.state}({o.reason})" for h, o in sorted(report.handlers.items())
            )
            log.info(
                "cycle %s; restarts %s; handlers: %s",
                report.result,
                ",".join(report.restarts) or "none",
                summary or "none",
            )

    # -- the loop --------------------------------------------------------------------

    def config_fingerprint(self) -> str | None:
        return fingerprint(self.agent.watched_files())

    def run(self) -> None:
        """Until ``stop``: a cycle at start, then on plan changes, resyncs and drift."""
        for target, name in (
            (self.view.watch_plan_forever, "plan-watch"),
            (self.view.watch_rollout_forever, "rollout-watch"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()
        next_cycle = self.clock()
        next_drift_check = self.clock() + self.options.drift_check_seconds
        while not self.stop.is_set():
            due = self.clock() >= next_cycle
            if not due and self.clock() >= next_drift_check:
                next_drift_check = self.clock() + self.options.drift_check_seconds
                if self.config_fingerprint() != self._config_fingerprint:
                    log.info("config.toml changed on disk; reconciling")
                    due = True
            if self.wake.is_set():
                self.wake.clear()
                due = True
            deferred = self.view.deferred_wake()
            if deferred is not None and self.clock() >= deferred:
                due = True
            if due:
                self.view.cycle_starts()
                try:
                    report = self.cycle()
                except Exception as error:  # a bug must not take the node's agent down
                    log.exception("reconcile failed unexpectedly")
                    self.metrics.applies.labels("error").inc()
                    self.health.idle(ready=False, error=f"reconcile failed: {error}")
                    next_cycle = self.clock() + self.options.retry_seconds
                    continue
                self._config_fingerprint = self.config_fingerprint()
                retry = report.requeue or report.result in ("failed", "rolled_back")
                delay = self.options.retry_seconds if retry else self.options.resync_seconds
                next_cycle = self.clock() + delay
                continue
            deferred = self.view.deferred_wake()
            pending = [deferred] if deferred is not None else []
            wake_at = min(next_cycle, next_drift_check, *pending)
            wait = wake_at - self.clock()
            self.wake.wait(max(0.0, min(wait, WAIT_SLICE_SECONDS)))
        self.health.stopping()
