"""One cycle on the node: judge the plan for this host, then let the other rooms act.

``NodeAgent.reconcile`` reads the host's facts, the state and config.toml (finishing what a
killed predecessor began), chooses the handlers this host can run and places them where
this node's containerd reads them (``eligibility``, ``handler_placement``: a drop-in, the
template, or merged into config.toml), and then:

- ``rollout_gate``: whether the node may change config.toml to the plan now (paced rollout);
- ``transaction``: the change as one transaction (preflight, write, restart, rollback),
  or written for containerd's owner to restart (``restart_wait``, ``--restart-mode none``);
- ``proving``: a canary for each changed handler;
- ``pause_change``: a change of the pause image, held until proven;
- ``adoptions``, ``host_cleanup``: what an adoption replaced or gave back, and
  ``wcow-agent uninstall``.

It returns a ``CycleReport``; the runner turns that into labels, status, metrics and events.
"""

from __future__ import annotations

import threading
import time
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_agent.config.files import read_config, sweep_temp_files
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.node_paths import NodePaths, SamePaths
from wcow_agent.config.placed import Placed
from wcow_agent.config.placement_record import PlacementRecord
from wcow_agent.config.state import Paths, StateJournal
from wcow_agent.config.toml_text import ParseOnce
from wcow_agent.cycle import pause_change, restart_wait, rollout_gate
from wcow_agent.cycle.adoptions import note_adoptions
from wcow_agent.cycle.canary import Canary
from wcow_agent.cycle.decisions import (
    CycleReport,
    HandlerOutcome,
    HostFacts,
    NodeLabels,
    drifted,
    guest_builds_of,
    restart_reason,
    selected_handlers,
)
from wcow_agent.cycle.eligibility import Host as EligibilityHost
from wcow_agent.cycle.eligibility import block_cim_relevant, classify_handlers
from wcow_agent.cycle.handler_placement import (
    NodeText,
    PlacementRefusedError,
    note_rewrite,
    place_on_node,
)
from wcow_agent.cycle.host_cleanup import Uninstaller
from wcow_agent.cycle.pause_edit import PauseEdits
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
    changed_elsewhere: bool = False
    """The configuration on disk is not what the agent wrote nor what containerd ran."""


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
        layout: NodeLayout | None = None,
        node_paths: NodePaths | None = None,
        hyperv_why: str | None = None,
    ) -> None:
        """``layout``: where containerd's configuration is, how containerd restarts (default:
        ``paths.config``, its own service); ``node_paths``: how its paths are opened."""
        self.host = host
        self.layout = layout or NodeLayout("custom", paths.config, why="the agent's flags")
        self.hyperv_why = hyperv_why  # HyperVUnavailable's message on AKS, GKE, EKS
        self.files = NodeFiles(self.layout, node_paths or SamePaths())
        self.pause_flag = pause_image
        """``--pause-image``: the pause image the agent sets in config.toml (None: the
        agent leaves the key as the node has it, or puts back what it replaced)."""
        self.adopt = frozenset(adopt)
        """Handlers whose hand-written table the agent may take over (--adopt-handlers)."""
        self.paths = paths
        self.timeouts = timeouts or Timeouts()
        self.canary = Canary(host.cri, host.hcs, log_root, clock)
        self.restart = Restarter(host, self.timeouts, clock, sleep)
        self.transaction = Transaction(
            host, paths, self.restart, self.files, self.layout.restart_mode
        )
        self.prover = Prover(host, self.canary, cancel, canary_images)
        self.prover.may_restart = self.layout.restart_mode != "none"
        self.parse = ParseOnce()
        """config.toml parsed once per text: the merge and the pause image share it."""
        self.pause = PauseImages(host, paths, self.parse)
        self.pause_edits = PauseEdits(pause_image, self.pause)
        self._watched: tuple[Path, ...] = _watched(self.layout, None)
        self._build: WindowsBuild | None = None
        self._hyperv: bool | None = None
        self._containerd_version: str | None = None

    def watched_files(self) -> tuple[Path, ...]:
        """config.toml, the template and the agent's drop-in: what the drift check hashes."""
        return self._watched

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
        uninstaller = Uninstaller(
            self.host,
            self.paths,
            self.canary,
            self.restart,
            self.files,
            restart_mode=self.layout.restart_mode,
        )
        return uninstaller.run()

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
        if self.layout.unplaced is not None:
            _refused(report, plan, "NodeLayoutUnknown", self.layout.unplaced)
            return report
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
                    self._watched = _watched(self.layout, cycle.journal.state.placement)
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
        eligible, placed = judged
        report, journal = cycle.report, cycle.journal
        plan_changes = placed.changed()
        pause_change.forget_stale(report, journal, self.pause_flag)
        placed, pause_changes = self.pause_edits.edit(report, journal, placed)
        # The rollout paces plan changes; a pause image change alone reaches the node with
        # its agent pod (the DaemonSet's own rolling update, held by readiness: pause_change.py),
        # and rides with a plan change.
        result = placed.result
        verdict = rollout_gate.open_gate(result, journal, plan, pace, plan_changes)
        if verdict.allowed and plan_changes:
            verdict = rollout_gate.begin_attempt(
                report,
                journal,
                cycle.facts,
                result,
                eligible,
                verdict=verdict,
                pace=pace,
                config_hash=placed.config_hash,
            )
        elif verdict.allowed:
            rollout_gate.take_unchanged(journal, plan.hash)
        failed: Failures = {}
        if not verdict.allowed:
            rollout_gate.hold(report, journal, result, plan, verdict.message)
        elif plan_changes or pause_changes:
            touched = sorted({*result.added, *result.updated} & set(eligible))
            if pause_changes:
                before = None if cycle.created else cycle.original
                self.pause_edits.begin(report, journal, placed, before, (cycle.facts, eligible))
            change = Change(placed, cycle.original, cycle.created, touched or sorted(eligible))
            failed = self.transaction.run(report, journal, change, cycle.facts)
            if pause_changes:
                pause_change.after_transaction(report, journal, failed)
                # The handlers' tables did not change: they are proven again, not failed.
                failed = {h: why for h, why in failed.items() if h in touched}
        if not pause_changes:
            pause_change.loaded_elsewhere(journal)
        self.pause_edits.survey(report, cycle.facts)
        waiting = verdict.allowed and restart_wait.wait_for_restart(
            self.host, self.layout, (report, journal), placed, eligible
        )
        self.prover.prove(
            report, journal, result.owned, eligible, failed_apply=failed, force=force_canary
        )
        if waiting:
            restart_wait.restart_seen(report, journal, placed)
        pause_change.judge(report, journal, eligible)
        if pause_changes and report.result == "applied" and self.pause_flag is None:
            pause_change.release_if_proven(journal)
        if verdict.allowed:
            note_adoptions(report, result, self.paths)
            rollout_gate.settle(report, journal, plan.hash)

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
        disk_hash = self.files.disk_hash(None if created else original, journal.state.placement)
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
            cycle.changed_elsewhere = True
            cycle.report.event(
                "ConfigChangedElsewhere",
                f"{config} was rewritten by something else; checking the agent's tables",
            )
            if self.layout.restart_mode != "none":  # else: not known what containerd runs
                cycle.journal.containerd_runs(disk_hash)
        if restart_reason(state, disk_hash, self.layout.restart_mode):
            self.transaction.recover(cycle.report, cycle.journal, disk_hash)
            if config.exists() and cycle.original != read_config(config):
                cycle.original = read_config(config)  # rolled back to the backup
            cycle.disk_hash = self.transaction.disk_hash(cycle.journal.state.placement)

    def _judge(self, cycle: Cycle, plan: Plan) -> tuple[dict[str, PlanEntry], Placed] | None:
        """Which handlers this host runs, and where they go (None: the node is refused)."""
        report, facts, state = cycle.report, cycle.facts, cycle.journal.state
        eligible, refused = classify_handlers(
            selected_handlers(plan.handlers, _labels(self.pause, cycle, plan)),
            _judged_host(self, cycle, plan),
        )
        report.handlers = {
            handler: HandlerOutcome(
                "NotEligible", r.reason, r.message, plan.handlers[handler].generation
            )
            for handler, r in refused.items()
        }
        desired = {handler: entry.runtime for handler, entry in eligible.items()}
        root = NodeText(cycle.original, cycle.created)
        try:
            placed = place_on_node(
                self.files,
                root,
                desired,
                state,
                facts.containerd_version,
                adopt=self.adopt,
                parse=self.parse,
            )
        except PlacementRefusedError as refusal:
            report.placement = refusal.placement
            _refused(report, plan, refusal.placement.reason, str(refusal), eligible)
            return None
        except ConfigError as error:
            _refused(report, plan, "ConfigRefused", str(error), eligible)
            return None
        result = placed.result
        report.placement = placed.placement
        report.config_version = result.version
        for handler, message in result.conflicts.items():
            report.handlers[handler] = HandlerOutcome(
                "Conflict", "ConflictingTable", message, eligible[handler].generation
            )
        report.drift_repaired = drifted(result, state.owned, desired, placed.moved)
        if report.drift_repaired:
            report.event(
                "DriftRepaired",
                "containerd's configuration lost or changed the agent's tables for "
                f"{', '.join(report.drift_repaired)}; writing them again",
                warning=True,
            )
        note_rewrite(report, placed, cycle.changed_elsewhere)
        report.removed = [h for h in result.removed if h not in desired]
        return eligible, placed


def _watched(layout: NodeLayout, record: PlacementRecord | None) -> tuple[Path, ...]:
    found = [layout.config, *([layout.template] if layout.template is not None else [])]
    if record is not None and Path(record.target) not in found:
        found.append(Path(record.target))
    return tuple(found)


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


def _judged_host(agent: NodeAgent, cycle: Cycle, plan: Plan) -> EligibilityHost:
    """The host's facts eligibility judges by, with the platform's word on Hyper-V."""
    facts = cycle.facts
    return EligibilityHost(
        _build(facts.build),
        facts.hyperv_available,
        facts.containerd_version,
        agent.hyperv_why,
        _effective(agent.host, agent.paths, cycle, plan),
    )


def _effective(host: Host, paths: Paths, cycle: Cycle, plan: Plan) -> dict[str, Any] | None:
    """containerd's effective configuration, read only where it decides something: a Hyper-V
    handler on containerd 2.3+ (block CIM); None: not read or not readable (the canary still
    decides)."""
    if not block_cim_relevant(plan.handlers.values(), cycle.facts.containerd_version):
        return None
    containerd = host.containerd
    try:
        dump = (
            containerd.config_default() if cycle.created else containerd.config_dump(paths.config)
        )
        return tomllib.loads(dump)
    except (HostError, tomllib.TOMLDecodeError):
        return None


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
