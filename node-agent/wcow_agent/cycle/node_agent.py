"""One cycle on the node: judge the plan for this host, then let the other rooms act.

``NodeAgent.reconcile`` reads the host's facts, the state and config.toml (finishing what a
killed predecessor began), chooses the handlers this host can run and merges them
(``eligibility``, ``merge``), and then:

- ``rollout_gate``: whether the node may change config.toml to the plan now (paced rollout);
- ``transaction``: the change as one transaction (preflight, write, restart, rollback);
- ``proving``: a canary for each changed handler;
- ``pause_change``: a change of the pause image, held until proven;
- ``adoptions``, ``host_cleanup``: what an adoption replaced or gave back, and
  ``wcow-agent uninstall``.

It returns a ``CycleReport``; the runner turns that into labels, status, metrics and events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.files import read_config, sweep_temp_files
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.sandbox_image import held_pause_image, with_pause_image
from wcow_agent.config.state import Paths, StateJournal
from wcow_agent.config.toml_text import ParseOnce
from wcow_agent.cycle import pause_change, rollout_gate
from wcow_agent.cycle.adoptions import note_adoptions
from wcow_agent.cycle.canary import Canary
from wcow_agent.cycle.decisions import (
    CycleReport,
    HandlerOutcome,
    HostFacts,
    NodeLabels,
    drifted,
    guest_builds_of,
    merge_on_host,
    restart_reason,
    selected_handlers,
)
from wcow_agent.cycle.eligibility import Host as EligibilityHost
from wcow_agent.cycle.eligibility import classify_handlers
from wcow_agent.cycle.host_cleanup import Uninstaller
from wcow_agent.cycle.pause_image import PauseImage, PauseImages
from wcow_agent.cycle.proving import Prover
from wcow_agent.cycle.rollout_gate import Pace
from wcow_agent.cycle.transaction import NO_FILE, Change, Failures, Restarter, Timeouts, Transaction
from wcow_agent.host.interfaces import ContainerdError, Host, HostError
from wcow_contract.catalog.windows_builds import WindowsBuild
from wcow_contract.wire.plan import Plan, PlanEntry


@dataclass
class Cycle:
    """What one reconcile has learnt so far."""

    report: CycleReport
    facts: HostFacts
    journal: StateJournal
    original: str
    """config.toml as read (containerd's defaults when there is none)."""
    created: bool
    """There is no config.toml: writing one creates it."""
    disk_hash: str | None
    node: NodeLabels | None = None
    """The Node's labels (None: not known, nodeSelectors are not judged)."""

    def changes_file(self, result: MergeResult) -> bool:
        """Whether the merge changes config.toml (a file the agent would only seed from
        containerd's defaults, with no table of its own, is not written)."""
        return result.changed(self.original) and not (self.created and not result.owned)


class NodeAgent:
    def __init__(
        self,
        host: Host,
        paths: Paths,
        *,
        log_root: str,
        timeouts: Timeouts | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        cancel: threading.Event | None = None,
        adopt: Collection[str] = (),
        canary_images: Mapping[str, str] | None = None,
        pause_image: str | None = None,
    ) -> None:
        self.host = host
        self.pause_flag = pause_image
        """``--pause-image``: the pause image the agent sets in config.toml (None: the
        agent leaves the key as the node has it, or puts back what it replaced)."""
        self.adopt = frozenset(adopt)
        """Handlers whose hand-written table the agent may take over (--adopt-handlers)."""
        self.paths = paths
        self.timeouts = timeouts or Timeouts()
        self.canary = Canary(host.cri, host.hcs, log_root, clock)
        self.restart = Restarter(host, self.timeouts, clock, sleep)
        self.transaction = Transaction(host, paths, self.restart)
        self.prover = Prover(host, self.canary, cancel, canary_images)
        self.parse = ParseOnce()
        """config.toml parsed once per text: the merge and the pause image share it."""
        self.pause = PauseImages(host, paths, self.parse)
        self._build: WindowsBuild | None = None
        self._hyperv: bool | None = None
        self._containerd_version: str | None = None

    def facts(self) -> HostFacts:
        """Build and Hyper-V once per process (they change only with a reboot, which
        restarts the agent); containerd's version every cycle (upgrades)."""
        if self._build is None:
            self._build = self.host.windows.windows_build()
        if self._hyperv is None:
            self._hyperv = self.host.windows.hyperv_available()
        try:
            self._containerd_version = self.host.containerd.version()
        except ContainerdError:
            if self._containerd_version is None:
                raise
        return HostFacts(self._build.label_value, self._hyperv, self._containerd_version)

    def uninstall(self) -> list[str]:
        """``wcow-agent uninstall`` (see ``Uninstaller.run``)."""
        return Uninstaller(self.host, self.paths, self.canary, self.restart).run()

    def reconcile(
        self,
        plan: Plan | None,
        force_canary: bool = False,
        pace: Pace | None = None,
        node: NodeLabels | None = None,
    ) -> CycleReport:
        """Bring config.toml and containerd in line with ``plan`` (None: no plan known,
        change nothing but finish an interrupted restart), then prove what changed.
        ``pace``: the rollout's permission; None applies at once (an unpaced plan).
        ``node``: the Node's labels, which profiles' nodeSelectors are judged against
        (None: not judged, every handler is a candidate)."""
        report = CycleReport(plan_hash=plan.hash if plan else None)
        try:
            cycle = self._begin(report, plan)
            if cycle is not None:
                cycle.node = node
                try:
                    if plan is not None:
                        self._steps(cycle, plan, force_canary, pace)
                finally:
                    report.attempted_plan_hash = cycle.journal.state.attempted_plan
                    report.applied_plan_hash = cycle.journal.state.applied_plan
        except OSError as error:
            # A file the agent could not write (held open by another process, disk full):
            # the state on disk is consistent at every step, so the next cycle retries.
            message = f"{getattr(error, 'filename', None) or self.paths.config}: {error}"
            report.result = "failed"
            report.event("FileError", message, warning=True)
            if plan is not None:
                outcomes = report.handlers if report.handlers is not None else {}
                for handler, entry in plan.handlers.items():
                    if outcomes.get(handler) is None or outcomes[handler].state == "Ready":
                        outcomes[handler] = HandlerOutcome(
                            "Failed", "FileError", message, entry.generation
                        )
                report.handlers = outcomes
        return report

    def _steps(self, cycle: Cycle, plan: Plan, force_canary: bool, pace: Pace | None) -> None:
        judged = self._judge(cycle, plan)
        if judged is None:
            return
        eligible, result = judged
        report, journal = cycle.report, cycle.journal
        plan_changes = cycle.changes_file(result)
        pause_change.forget_stale(report, journal, self.pause_flag)
        result, pause_changes = self._pause_edit(cycle, result)
        # The rollout paces plan changes; a pause image change alone reaches the node with
        # its agent pod (the DaemonSet's own rolling update, held by readiness: pause_change.py),
        # and rides with a plan change.
        verdict = rollout_gate.open_gate(result, journal, plan, pace, plan_changes)
        if verdict.allowed and plan_changes:
            verdict = rollout_gate.begin_attempt(
                report, journal, cycle.facts, result, eligible, verdict=verdict, pace=pace
            )
        elif verdict.allowed:
            rollout_gate.take_unchanged(journal, plan.hash)
        failed: Failures = {}
        if not verdict.allowed:
            rollout_gate.hold(report, journal, result, plan, verdict.message)
        elif plan_changes or pause_changes:
            touched = sorted({*result.added, *result.updated} & set(eligible))
            if pause_changes:
                self._begin_pause_change(cycle, result, eligible)
            change = Change(result, cycle.original, cycle.created, touched or sorted(eligible))
            failed = self.transaction.run(report, journal, change, cycle.facts)
            if pause_changes:
                pause_change.after_transaction(report, journal, failed)
                # The handlers' tables did not change: they are proven again, not failed.
                failed = {h: why for h, why in failed.items() if h in touched}
        if not pause_changes:
            pause_change.loaded_elsewhere(journal)
        self._survey_pause_image(report, cycle.facts)
        self.prover.prove(
            report, journal, result.owned, eligible, failed_apply=failed, force=force_canary
        )
        pause_change.judge(report, journal, eligible)
        if pause_changes and report.result == "applied" and self.pause_flag is None:
            pause_change.release_if_proven(journal)
        if verdict.allowed:
            note_adoptions(report, result, self.paths)
            rollout_gate.settle(report, journal, plan.hash)

    def _pause_edit(self, cycle: Cycle, result: MergeResult) -> tuple[MergeResult, bool]:
        """The merged file with the pause image the agent manages (``--pause-image``, or
        the value it replaced, put back once the flag is gone); whether that changes it."""
        journal = cycle.journal
        manage, image = pause_change.edit_target(self.pause_flag, journal.state)
        if not manage:
            return result, False
        try:
            text = with_pause_image(result.text, result.version, image)
        except ConfigError as error:
            cycle.report.event("PauseImageNotSet", str(error), warning=True)
            return result, False
        unproven = journal.state.pause_change is not None
        if text == result.text and self.pause_flag is None and not unproven:
            journal.pause_image_released()  # the file holds what it held before the agent
        return replace(result, text=text), text != result.text

    def _begin_pause_change(
        self, cycle: Cycle, result: MergeResult, eligible: Mapping[str, PlanEntry]
    ) -> None:
        """Before the first write of the key: what it held, to put back later; before each
        change: the record that holds readiness until the change is proven."""
        journal = cycle.journal
        self._hold_pause_image(cycle, result)
        _, target = pause_change.edit_target(self.pause_flag, journal.state)
        source = None if cycle.created else held_pause_image(cycle.original, result.version)
        try:
            before: PauseImage | None = self.pause.current()
        except (HostError, OSError, ValueError):
            before = None  # which guest builds it boots is not known: none is left out
        baseline = pause_change.ready_before(journal.state, eligible, before, cycle.facts)
        pause_change.begin(
            cycle.report, journal, (target, source), baseline, text_hash(result.text)
        )

    def _hold_pause_image(self, cycle: Cycle, result: MergeResult) -> None:
        """Before the first write of the key: what it held, to put back later."""
        if not cycle.journal.state.pause_held:
            previous = None if cycle.created else held_pause_image(cycle.original, result.version)
            cycle.journal.pause_image_held(previous)

    def _survey_pause_image(self, report: CycleReport, facts: HostFacts) -> None:
        """Which pause image containerd runs sandboxes from and which guest builds it boots
        (asked again after containerd restarted); unknown when CRI cannot say."""
        if report.restarts:
            self.pause.forget()
        try:
            pause = self.pause.current()
        except (HostError, OSError, ValueError) as error:
            report.event("PauseImageUnknown", f"cannot read the node's pause image: {error}")
            return
        report.pause_image = pause.image
        report.pause_build = pause.build
        report.guest_builds = guest_builds_of(pause.build, facts)
        if pause.build is None:
            report.event(
                "PauseImageBuildUnknown",
                f"the pause image {pause.image} names no Windows build (os.version) in its "
                "config: no guest build is known to boot from it",
                warning=True,
            )

    def _begin(self, report: CycleReport, plan: Plan | None) -> Cycle | None:
        """Host facts, state, the file on disk, and what a killed predecessor left."""
        try:
            facts = self.facts()
        except HostError as error:
            report.result = "failed"
            report.event("HostFactsUnavailable", str(error), warning=True)
            if plan is not None:
                report.handlers = {
                    h: HandlerOutcome("Failed", "HostFactsUnavailable", str(error))
                    for h in plan.handlers
                }
            return None
        report.facts = facts
        journal, warning = StateJournal.load(self.paths.state)
        if warning:
            report.event("StateUnreadable", warning, warning=True)
        sweep_temp_files(self.paths.config)
        if not self.prover.swept:
            self.prover.sweep(report)
        config = self.paths.config
        created = not config.exists()
        try:
            original = self.host.containerd.config_default() if created else read_config(config)
        except (HostError, OSError, UnicodeDecodeError) as error:
            _refused(report, plan, "ConfigUnreadable", f"{config}: {error}")
            return None
        disk_hash = None if created else text_hash(original)
        cycle = Cycle(report, facts, journal, original, created, disk_hash)
        self._what_containerd_runs(cycle)
        return cycle

    def _what_containerd_runs(self, cycle: Cycle) -> None:
        """Record what containerd runs when it is news, and finish a restart a killed
        predecessor began before anything else changes."""
        state, disk_hash, config = cycle.journal.state, cycle.disk_hash, self.paths.config
        if state.loaded is None and not state.restart_pending:
            # First contact: containerd runs what is on disk (or its defaults: no file).
            cycle.journal.containerd_runs(NO_FILE if cycle.created else str(disk_hash))
        elif (
            disk_hash is not None
            and disk_hash not in (state.written, state.loaded)
            and not state.restart_pending
        ):
            cycle.report.event(
                "ConfigChangedElsewhere",
                f"{config} was rewritten by something else; checking the agent's tables",
            )
            cycle.journal.containerd_runs(disk_hash)
        if restart_reason(state, disk_hash):
            self.transaction.recover(cycle.report, cycle.journal, disk_hash)
            if config.exists() and cycle.disk_hash != text_hash(read_config(config)):
                cycle.original = read_config(config)  # rolled back to the backup
                cycle.disk_hash = text_hash(cycle.original)

    def _judge(self, cycle: Cycle, plan: Plan) -> tuple[dict[str, PlanEntry], MergeResult] | None:
        """Which handlers this host runs, and the merged file (None: the file is refused)."""
        report, facts, state = cycle.report, cycle.facts, cycle.journal.state
        eligible, refused = classify_handlers(
            selected_handlers(plan.handlers, _labels(self.pause, cycle, plan)),
            EligibilityHost(_build(facts.build), facts.hyperv_available, facts.containerd_version),
        )
        report.handlers = {
            handler: HandlerOutcome(
                "NotEligible", r.reason, r.message, plan.handlers[handler].generation
            )
            for handler, r in refused.items()
        }
        desired = {handler: entry.runtime for handler, entry in eligible.items()}
        pristine = read_config(self.paths.pristine) if self.paths.pristine.exists() else None
        try:
            result = merge_on_host(
                cycle.original,
                desired,
                state,
                facts.containerd_version,
                pristine,
                adopt=self.adopt,
                parse=self.parse,
            )
        except ConfigError as error:
            _refused(report, plan, "ConfigRefused", str(error), eligible)
            return None
        report.config_version = result.version
        for handler, message in result.conflicts.items():
            report.handlers[handler] = HandlerOutcome(
                "Conflict", "ConflictingTable", message, eligible[handler].generation
            )
        report.drift_repaired = drifted(result, state.owned, desired)
        if report.drift_repaired:
            report.event(
                "DriftRepaired",
                "config.toml lost or changed the agent's tables for "
                f"{', '.join(report.drift_repaired)}; writing them again",
                warning=True,
            )
        report.removed = [h for h in result.removed if h not in desired]
        return eligible, result


def _labels(pause_images: PauseImages, cycle: Cycle, plan: Plan) -> dict[str, str] | None:
    """The labels the Node will carry after this cycle, for the plan's nodeSelectors
    (None: not known, or no entry selects: nothing to judge). The guest-build labels come
    from the pause image containerd runs now (unknown: the Node's as they are)."""
    if cycle.node is None or not any(e.node_selector for e in plan.handlers.values()):
        return None
    try:
        pause: PauseImage | None = pause_images.current()
    except (HostError, OSError, ValueError):
        pause = None
    builds = guest_builds_of(pause.build, cycle.facts) if pause is not None else None
    return cycle.node.after_report(cycle.facts, builds)


def _refused(
    report: CycleReport,
    plan: Plan | None,
    reason: str,
    message: str,
    eligible: dict[str, PlanEntry] | None = None,
) -> None:
    """config.toml cannot be edited: nothing is written, every handler that should be
    applied fails closed (its label goes), the message says what to fix."""
    report.result = "refused"
    report.event(reason, message, warning=True)
    if plan is not None:
        outcomes = report.handlers if report.handlers is not None else {}
        for handler, entry in (eligible or plan.handlers).items():
            outcomes.setdefault(
                handler, HandlerOutcome("Failed", reason, message, entry.generation)
            )
        report.handlers = outcomes


def _build(label: str) -> WindowsBuild:
    return WindowsBuild(int(label.rsplit(".", 1)[1]))
