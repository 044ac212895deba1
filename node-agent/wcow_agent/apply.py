"""One apply cycle on the node: read, merge, write, restart, prove, and nothing more.

The order of an apply is what makes it crash-safe (the agent may be killed at any line):

1. the candidate file is checked by the node's own containerd (``config dump``) before
   anything is written: a file containerd cannot load never replaces the old one;
2. the state file records the union of old and new ownership (so a table written in 3 is
   never mistaken for a user's table), then
3. config.toml is replaced atomically (temp file, flush, rename; the previous file is kept
   as ``config.toml.wcow-backup``), then
4. the state records "written, restart pending" before the restart, and "loaded" after
   containerd answers on CRI again.

A new agent that finds "restart pending", or a file it wrote that containerd never came up
with, restarts containerd before doing anything else. If containerd does not answer with
the new file, the old file is put back, containerd restarted again, and the new file's hash
is remembered as rejected so the same file is never retried in a loop.

A paced plan (``pacing.py``) changes config.toml only with the rollout's permission; the
agent records the attempt on the Node before it restarts containerd, and calls the plan
applied only once every handler the attempt changed has passed its canary.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from wcow_agent.agent import (
    CycleReport,
    HandlerOutcome,
    HostFacts,
    builtin_runtimes_for,
    canary_enabled,
    drifted,
    needs_canary,
    restart_reason,
)
from wcow_agent.canary import Canary, CanaryResult, CanarySpec
from wcow_agent.eligibility import Host as EligibilityHost
from wcow_agent.eligibility import classify_handlers
from wcow_agent.files import read_config, sweep_temp_files, write_atomically
from wcow_agent.host.containerd import config_version_for
from wcow_agent.host.interfaces import ContainerdError, Host, HostError
from wcow_agent.merge import ConfigError, MergeResult, merge_config
from wcow_agent.pacing import SEEDED, Gate, Permission, decide, holds_agent_tables
from wcow_agent.state import AgentState, Paths, load_state, save_state, text_hash
from wcow_contract.agent_status import HandlerState
from wcow_contract.plan import Plan, PlanEntry
from wcow_contract.runtime_table import RUNTIMES_PATH
from wcow_contract.windows_builds import WindowsBuild

log = logging.getLogger("wcow_agent")

CRI_POLL_SECONDS = 2.0
NO_FILE = "none"  # state.loaded when containerd runs without a config.toml


@dataclass(frozen=True)
class Timeouts:
    restart: float = 120.0
    """How long containerd may take to restart and answer on CRI."""
    cri_poll: float = CRI_POLL_SECONDS


class UninstallError(RuntimeError):
    pass


def _recorded(_: CycleReport) -> bool:
    return True


@dataclass(frozen=True)
class Pace:
    """The rollout's word for one cycle. Without one a plan is applied at once."""

    permission: Permission
    node: str
    announce: Callable[[CycleReport], bool] = _recorded
    """Records the attempt (``attempted_plan_hash``) on the Node before config.toml
    changes and containerd restarts; False: it could not, so a paced change waits."""


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
    ) -> None:
        self.host = host
        self.adopt = frozenset(adopt)
        """Handlers whose hand-written table the agent may take over (--adopt-handlers)."""
        self.paths = paths
        self.timeouts = timeouts or Timeouts()
        self.clock = clock
        self.sleep = sleep
        self.cancel = cancel
        self.canary = Canary(host.cri, host.hcs, log_root, clock)
        self._build: WindowsBuild | None = None
        self._hyperv: bool | None = None
        self._containerd_version: str | None = None
        self._swept = False
        self._failed_canaries: set[str] = set()
        self._not_loaded_restart: str | None = None

    # -- facts -----------------------------------------------------------------------

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

    # -- the cycle -------------------------------------------------------------------

    def reconcile(
        self,
        plan: Plan | None,
        force_canary: bool = False,
        pace: Pace | None = None,
    ) -> CycleReport:
        """Bring config.toml and containerd in line with ``plan`` (None: no plan known,
        change nothing but finish an interrupted restart), then prove what changed.
        ``pace``: the rollout's permission; None applies at once (an unpaced plan)."""
        report = CycleReport(plan_hash=plan.hash if plan else None)
        try:
            return self._reconcile(report, plan, force_canary, pace)
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

    def _reconcile(
        self,
        report: CycleReport,
        plan: Plan | None,
        force_canary: bool,
        pace: Pace | None,
    ) -> CycleReport:
        cycle = self._begin(report, plan)
        if cycle is None:
            return report
        try:
            if plan is not None:
                self._steps(cycle, plan, force_canary, pace)
        finally:
            report.attempted_plan_hash = cycle.state.attempted_plan
            report.applied_plan_hash = cycle.state.applied_plan
        return report

    def _steps(self, cycle: _Cycle, plan: Plan, force_canary: bool, pace: Pace | None) -> None:
        eligible = self._judge(cycle, plan)
        if eligible is None or cycle.result is None:
            return
        gate = self._gate(cycle, plan, pace)
        if gate.allowed and cycle.changes_file:
            gate = self._begin_attempt(cycle, plan, eligible, gate, pace)
        elif gate.allowed:
            self._adopt(cycle, plan)
        if not gate.allowed:
            self._hold(cycle, plan, gate.message)
            self._prove(cycle, plan, eligible, {}, force_canary)
            return
        failed_apply = self._write(cycle, eligible)
        self._prove(cycle, plan, eligible, failed_apply, force_canary)
        self._note_adoptions(cycle)
        self._finish_attempt(cycle, plan)

    # -- the paced rollout -------------------------------------------------------------

    def _gate(self, cycle: _Cycle, plan: Plan, pace: Pace | None) -> Gate:
        result = cycle.require_result()
        return decide(
            pace.permission if pace is not None else Permission(),
            plan.hash,
            pace.node if pace is not None else "",
            changes_file=cycle.changes_file,
            holds_tables=holds_agent_tables(result, cycle.state.owned),
        )

    def _begin_attempt(
        self,
        cycle: _Cycle,
        plan: Plan,
        eligible: Mapping[str, PlanEntry],
        gate: Gate,
        pace: Pace | None,
    ) -> Gate:
        """Record that the node starts changing to the plan, on the Node first when the
        rollout counts on it (permitted, or a new node), then in the state."""
        state, result, plan_hash = cycle.state, cycle.require_result(), plan.hash
        touched = {*result.added, *result.updated} & set(eligible)
        fresh = state.attempted_plan != plan_hash or state.attempt_grant != gate.grant
        if not fresh:
            if not touched <= set(state.unproven):
                state.unproven = sorted(set(state.unproven) | touched)
                save_state(self.paths.state, state)
            return gate
        if gate.grant is not None and state.attempted_plan == plan_hash:
            # Let in again for the same plan (the operator's resume): a file containerd
            # refused under the last permission gets one more try, not one per cycle.
            state.rejected.pop(text_hash(result.text), None)
        # Only a paced rollout counts on the Node's word; an unpaced plan is reported
        # once, after the cycle, as before.
        counted = pace is not None and gate.reason in ("Permitted", "NewNode")
        # What it is about to change is Pending from now on: the last result of those
        # handlers (a failure of an earlier plan, say) is not this attempt's.
        notice = CycleReport(
            facts=cycle.facts,
            plan_hash=plan_hash,
            attempted_plan_hash=plan_hash,
            applied_plan_hash=state.applied_plan,
            handlers={
                h: HandlerOutcome(
                    "Pending",
                    "Applying",
                    f"changing to plan {plan_hash}",
                    eligible[h].generation,
                )
                for h in sorted(touched)
            },
        )
        if counted and pace is not None and not pace.announce(notice):
            cycle.report.requeue = True
            return Gate(
                False,
                "WaitingForRollout",
                f"plan {plan_hash} not begun: the attempt could not be recorded on the "
                "Node, which the rollout counts on; keeping the current config",
            )
        state.attempted_plan, state.attempt_grant = plan_hash, gate.grant
        state.unproven = sorted(touched)
        save_state(self.paths.state, state)
        return gate

    def _adopt(self, cycle: _Cycle, plan: Plan) -> None:
        """A plan that leaves config.toml as it is: taken without a restart or permission,
        and applied at once. A handler an earlier attempt failed stays Failed in the
        status, but holds up only the rollouts that change it again on this node."""
        state, plan_hash = cycle.state, plan.hash
        if state.attempted_plan == plan_hash:
            return
        state.unproven = []
        state.attempted_plan, state.attempt_grant = plan_hash, None
        save_state(self.paths.state, state)

    def _finish_attempt(self, cycle: _Cycle, plan: Plan) -> None:
        state, plan_hash = cycle.state, plan.hash
        if state.attempted_plan != plan_hash:
            return
        outcomes = cycle.report.handlers or {}
        unproven = sorted(
            h
            for h in state.unproven
            if h in outcomes and outcomes[h].state not in ("Ready", "NotEligible")
        )
        applied = plan_hash if not unproven else state.applied_plan
        if (unproven, applied) != (state.unproven, state.applied_plan):
            state.unproven, state.applied_plan = unproven, applied
            save_state(self.paths.state, state)

    def _hold(self, cycle: _Cycle, plan: Plan, why: str) -> None:
        """Keep config.toml as it is: a handler the plan would change stays Ready on its
        earlier table if that passed its canary (its label stays), else it is Pending."""
        report, state, result = cycle.report, cycle.state, cycle.require_result()
        report.result = "waiting"
        report.waiting = why
        outcomes = report.handlers if report.handlers is not None else {}
        handlers = plan.handlers
        for handler in sorted({*result.added, *result.updated, *result.removed, *result.restored}):
            mark = state.owned.get(handler)
            if mark == SEEDED or (mark is None and handler not in handlers):
                continue
            entry = handlers.get(handler)
            if mark is not None and state.canaried.get(handler) == mark:
                outcomes[handler] = HandlerOutcome(
                    "Ready",
                    "WaitingForRollout",
                    "ready with its earlier table; the change waits for rollout permission",
                    carried=True,
                )
            else:
                outcomes[handler] = HandlerOutcome(
                    "Pending",
                    "WaitingForRollout",
                    "not applied yet: waits for rollout permission",
                    entry.generation if entry is not None else None,
                )
        report.handlers = outcomes

    def _begin(self, report: CycleReport, plan: Plan | None) -> _Cycle | None:
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
        state, warning = load_state(self.paths.state)
        if warning:
            report.event("StateUnreadable", warning, warning=True)
        sweep_temp_files(self.paths.config)
        if not self._swept:
            self._sweep(report)
        config = self.paths.config
        created = not config.exists()
        try:
            original = self.host.containerd.config_default() if created else read_config(config)
        except (HostError, OSError, UnicodeDecodeError) as error:
            self._refused(report, plan, "ConfigUnreadable", f"{config}: {error}")
            return None
        disk_hash = None if created else text_hash(original)
        if state.loaded is None and not state.restart_pending:
            # First contact: containerd runs what is on disk (or its defaults: no file).
            state.loaded = NO_FILE if created else disk_hash
            save_state(self.paths.state, state)
        elif (
            disk_hash is not None
            and disk_hash not in (state.written, state.loaded)
            and not state.restart_pending
        ):
            report.event(
                "ConfigChangedElsewhere",
                f"{config} was rewritten by something else; checking the agent's tables",
            )
            state.loaded = disk_hash
            save_state(self.paths.state, state)
        cycle = _Cycle(report, facts, state, original, created, disk_hash)
        if restart_reason(state, disk_hash):
            # Finish what a killed predecessor began before changing anything else.
            self._recover(cycle)
            if config.exists() and cycle.disk_hash != text_hash(read_config(config)):
                cycle.original = read_config(config)  # rolled back to the backup
                cycle.disk_hash = text_hash(cycle.original)
        return cycle

    def _judge(self, cycle: _Cycle, plan: Plan) -> dict[str, PlanEntry] | None:
        """Which handlers this host runs, and the merged file (None: the file is refused)."""
        report, facts, state = cycle.report, cycle.facts, cycle.state
        eligible, refused = classify_handlers(
            plan.handlers,
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
        version = facts.containerd_version
        try:
            cycle.result = merge_config(
                cycle.original,
                desired,
                state.owned,
                builtin_runtimes_for(version),
                pristine,
                fallback_version=config_version_for(version) if version else None,
                adopt=self.adopt,
                adopted=state.adopted,
            )
        except ConfigError as error:
            self._refused(report, plan, "ConfigRefused", str(error), eligible)
            return None
        result = cycle.result
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
        return eligible

    def _write(
        self, cycle: _Cycle, eligible: Mapping[str, PlanEntry]
    ) -> dict[str, tuple[str, str]]:
        """Write and restart when the file changes; returns handlers whose change failed."""
        result, state, report = cycle.require_result(), cycle.state, cycle.report
        new_hash = text_hash(result.text)
        touched = sorted({*result.added, *result.updated} & set(eligible))
        if not cycle.changes_file:
            return {}
        if new_hash in state.rejected:
            report.result = "rejected"
            return dict.fromkeys(touched, ("ConfigRejectedBefore", state.rejected[new_hash]))
        unreachable = self._cri_unreachable()
        if unreachable:
            # Judging a restart needs CRI: without it a healthy containerd would be restarted
            # and rolled back on every cycle (crictl missing, a wrong --cri-endpoint).
            report.result = "refused"
            report.event("CriUnreachable", unreachable, warning=True)
            return dict.fromkeys(touched, ("CriUnreachable", unreachable))
        problem = self._preflight(result, cycle.facts)
        if problem:
            state.rejected[new_hash] = problem
            save_state(self.paths.state, state)
            report.result = "rejected"
            report.event("ConfigRejected", problem, warning=True)
            return dict.fromkeys(touched, ("ConfigRejected", problem))
        came_up, why = self._apply(report, state, cycle.original, result, cycle.created)
        return {} if came_up else dict.fromkeys(touched, ("ContainerdRolledBack", why))

    def _sweep(self, report: CycleReport) -> None:
        removed, error = self.canary.sweep()
        if removed:
            report.event("CanaryLeftoversRemoved", f"removed canary sandboxes {', '.join(removed)}")
        self._swept = error is None

    def _refused(
        self,
        report: CycleReport,
        plan: Plan | None,
        reason: str,
        message: str,
        eligible: Mapping[str, PlanEntry] | None = None,
    ) -> CycleReport:
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
        return report

    # -- writing and restarting ---------------------------------------------------------

    def _cri_unreachable(self) -> str | None:
        """Why containerd cannot be checked over CRI right now, before any change."""
        try:
            status = self.host.cri.status(10.0)
        except HostError as error:
            return (
                f"containerd does not answer on CRI before any change ({error}); nothing was "
                "written or restarted. Check that crictl is on PATH (--crictl) and the CRI "
                "endpoint (--cri-endpoint)"
            )
        if not status.runtime_ready:
            return (
                "containerd reports RuntimeReady=false before any change "
                f"({status.message or 'no reason given'}); nothing was written or restarted"
            )
        return None

    def _preflight(self, result: MergeResult, facts: HostFacts) -> str | None:
        """Ask the node's containerd to load the candidate (``config dump``) before it
        replaces anything; check that its default runtime and our handlers are there."""
        candidate = self.paths.config.with_name(f".{self.paths.config.name}.candidate.tmp")
        candidate.write_text(result.text, encoding="utf-8")
        try:
            dump = self.host.containerd.config_dump(candidate)
        except ContainerdError as error:
            return (
                f"containerd {facts.containerd_version or ''} cannot load the merged file: {error}"
            )
        finally:
            candidate.unlink(missing_ok=True)
        try:
            effective = tomllib.loads(dump)
        except tomllib.TOMLDecodeError:
            return None  # an unexpected dump format proves nothing either way
        runtimes, default = _dumped_runtimes(effective)
        if runtimes is None:
            return None
        if default and default not in runtimes:
            return (
                f"with the merged file containerd would have no default runtime {default!r} "
                "(containerd 1.x drops its built-in runtimes when the file defines any)"
            )
        missing = sorted(h for h in result.owned if h not in runtimes)
        if missing:
            return (
                f"containerd does not see handler(s) {', '.join(missing)} in the merged file "
                f"(config version {result.version} on containerd {facts.containerd_version})"
            )
        return None

    def _apply(
        self,
        report: CycleReport,
        state: AgentState,
        original: str,
        result: MergeResult,
        created: bool,
    ) -> tuple[bool, str]:
        paths = self.paths
        owned_before = dict(state.owned)
        adopted_before = dict(state.adopted)
        if result.owned and not owned_before and not created and not paths.pristine.exists():
            # The file before the agent's first change: removing everything restores it.
            write_atomically(paths.pristine, original, backup=False)
        new_hash = text_hash(result.text)
        # Recorded before the write: if the agent dies after it, the next one finds a file
        # it wrote that containerd never loaded, and restarts containerd.
        state.owned = {**owned_before, **result.owned}
        # The replaced hand-written tables are kept before the file that loses them is written.
        state.adopted = {**adopted_before, **result.adopted}
        state.created_config = state.created_config or created
        state.written = new_hash
        save_state(paths.state, state)
        write_atomically(paths.config, result.text, backup=not created)
        report.wrote = True
        state.restart_pending = True
        save_state(paths.state, state)
        came_up, why = self._restart_and_wait(report, "apply")
        if came_up:
            state.loaded = new_hash
            state.restart_pending = False
            state.owned = dict(result.owned)
            for handler in result.restored:
                state.adopted.pop(handler, None)
            save_state(paths.state, state)
            if not result.owned:  # nothing of ours left: the next first change records anew
                paths.pristine.unlink(missing_ok=True)
            report.result = "applied"
            return True, ""
        # Put the old file back (from memory: it is also the backup on disk).
        report.result = "rolled_back"
        report.event(
            "ContainerdRollback",
            f"containerd did not come up with the new config.toml ({why}); restoring the "
            "previous file",
            warning=True,
        )
        state.rejected[new_hash] = why
        save_state(paths.state, state)
        if created:
            paths.config.unlink(missing_ok=True)
            state.written = None
        else:
            write_atomically(paths.config, original, backup=False)
            state.written = text_hash(original)
        save_state(paths.state, state)
        back, why_back = self._restart_and_wait(report, "rollback")
        state.owned = owned_before
        state.adopted = adopted_before
        if back:
            state.loaded = state.written or NO_FILE
            state.restart_pending = False
        else:
            report.event(
                "ContainerdDown",
                f"containerd did not come up with the previous config.toml either: {why_back}",
                warning=True,
            )
        save_state(paths.state, state)
        return False, why

    def _recover(self, cycle: _Cycle) -> None:
        """Finish a restart a killed agent began; if containerd will not come up with a
        file the agent wrote, go back to the backup."""
        report, state, disk_hash = cycle.report, cycle.state, cycle.disk_hash
        report.event("RestartRecovery", "finishing a containerd restart an earlier run began")
        came_up, why = self._restart_and_wait(report, "recovery")
        if came_up:
            state.loaded = disk_hash or NO_FILE
            state.restart_pending = False
            save_state(self.paths.state, state)
            return
        backup = self.paths.backup
        if disk_hash is not None and disk_hash == state.written and backup.exists():
            previous = read_config(backup)
            if text_hash(previous) != disk_hash:
                state.rejected[disk_hash] = why
                write_atomically(self.paths.config, previous, backup=False)
                state.written = text_hash(previous)
                save_state(self.paths.state, state)
                report.result = "rolled_back"
                came_up, why = self._restart_and_wait(report, "rollback")
                if came_up:
                    state.loaded = state.written
                    state.restart_pending = False
                    save_state(self.paths.state, state)
                    return
        report.result = "failed"
        report.event("ContainerdDown", f"containerd does not come up: {why}", warning=True)
        save_state(self.paths.state, state)

    def _restart_and_wait(self, report: CycleReport, reason: str) -> tuple[bool, str]:
        """Restart containerd and wait until it answers on CRI with RuntimeReady. Not
        cancelled by a stop request: a half-done restart is worse than a late exit."""
        report.restarts.append(reason)
        limit = self.timeouts.restart
        deadline = self.clock() + limit
        try:
            self.host.containerd.restart(limit)
        except HostError as error:
            return False, f"restart failed: {error}"
        last = "no answer"
        while True:
            left = deadline - self.clock()
            try:
                status = self.host.cri.status(max(1.0, min(10.0, left)))
                if status.runtime_ready:
                    return True, ""
                last = status.message or "RuntimeReady is false"
            except HostError as error:
                last = str(error)
            if self.clock() >= deadline:
                return False, f"containerd did not answer on CRI within {limit:.0f} s: {last}"
            self.sleep(self.timeouts.cri_poll)

    def _note_adoptions(self, cycle: _Cycle) -> None:
        """Say what an adoption replaced or gave back: an event, the log, and the
        handler's message in the status annotation (kept while its state holds)."""
        report, result = cycle.report, cycle.result
        if result is None or report.result != "applied":
            return
        outcomes = report.handlers if report.handlers is not None else {}
        for handler, table in sorted(result.adopted.items()):
            note = (
                f"adopted the hand-written table {handler!r} of {self.paths.config} "
                f"(--adopt-handlers); it replaced {_compact(table)}, kept in "
                f"{self.paths.state.name} and written back when the agent lets go of it"
            )
            log.warning("%s", note)
            report.event("HandlerAdopted", note, warning=True)
            outcome = outcomes.get(handler)
            if outcome is not None:
                message = f"{outcome.message}; {note}" if outcome.message else note
                outcomes[handler] = replace(outcome, message=message, carried=False)
        for handler in result.restored:
            note = f"wrote back the hand-written table {handler!r} the agent had adopted"
            log.info("%s", note)
            report.event("AdoptedTableRestored", note)

    # -- canaries --------------------------------------------------------------------

    def _prove(
        self,
        cycle: _Cycle,
        plan: Plan,
        eligible: Mapping[str, PlanEntry],
        failed_apply: Mapping[str, tuple[str, str]],
        force: bool,
    ) -> None:
        """Canary each applied handler whose table has not passed one (or all, when
        forced); carry the result of those that have."""
        report, state, result = cycle.report, cycle.state, cycle.require_result()
        outcomes = report.handlers if report.handlers is not None else {}
        pending = [h for h in sorted(eligible) if h not in outcomes]
        cri_ready: bool | None = None
        for handler in pending:
            entry = eligible[handler]
            generation = entry.generation
            if handler in failed_apply:
                reason, message = failed_apply[handler]
                outcomes[handler] = HandlerOutcome("Failed", reason, message, generation)
                continue
            table = result.owned.get(handler)
            if table is None:  # not applied (should not happen: merge owns what it wrote)
                outcomes[handler] = HandlerOutcome(
                    "Failed", "NotApplied", "the table is not in config.toml", generation
                )
                continue
            if not canary_enabled(entry):
                outcomes[handler] = HandlerOutcome(
                    "Ready",
                    "CanaryDisabled",
                    "applied; the profile disables the canary",
                    generation,
                )
                continue
            forced = force or handler in report.drift_repaired
            if not needs_canary(handler, table, state, forced, handler in self._failed_canaries):
                outcomes[handler] = HandlerOutcome(
                    "Ready", "CanaryPassed", "", generation, carried=True
                )
                continue
            if self.cancel is not None and self.cancel.is_set():
                outcomes[handler] = HandlerOutcome(
                    "Pending", "AgentStopping", "the agent stopped before the canary", generation
                )
                continue
            if cri_ready is None:
                cri_ready = self._cri_ready_for_canary(report, outcomes, pending, eligible)
            if not cri_ready:
                break
            outcome = self._run_canary(report, state, handler, entry, table)
            outcomes[handler] = outcome
        report.handlers = outcomes

    def _cri_ready_for_canary(
        self,
        report: CycleReport,
        outcomes: dict[str, HandlerOutcome],
        pending: list[str],
        eligible: Mapping[str, PlanEntry],
    ) -> bool:
        state: HandlerState
        try:
            status = self.host.cri.status(10.0)
        except HostError as error:
            state, reason, message = "Failed", "ContainerdNotReady", str(error)
        else:
            if status.runtime_ready and status.network_ready:
                return True
            if status.runtime_ready:
                state, reason = "Pending", "NetworkNotReady"
                message = f"pod networking is not ready yet ({status.message}); retrying"
                report.requeue = True
            else:
                state, reason, message = "Failed", "ContainerdNotReady", status.message
        for handler in pending:
            outcomes.setdefault(
                handler,
                HandlerOutcome(state, reason, message, eligible[handler].generation),
            )
        return False

    def _run_canary(
        self,
        report: CycleReport,
        state: AgentState,
        handler: str,
        entry: PlanEntry,
        table: str,
    ) -> HandlerOutcome:
        generation = entry.generation
        spec = CanarySpec.from_plan(handler, entry)
        outcome: CanaryResult = self.canary.run(spec, self.cancel)
        report.canaries.append(outcome)
        if outcome.cleanup_error:
            self._swept = False  # sweep again next cycle
        if outcome.passed:
            state.canaried[handler] = table
            self._failed_canaries.discard(handler)
            save_state(self.paths.state, state)
            return HandlerOutcome(
                "Ready", outcome.reason, outcome.message, generation, outcome.duration_seconds
            )
        if outcome.reason == "CanaryCancelled":
            return HandlerOutcome("Pending", "AgentStopping", outcome.message, generation)
        state.canaried.pop(handler, None)
        self._failed_canaries.add(handler)
        disk_hash = state.written or state.loaded
        if outcome.reason == "RuntimeNotLoaded" and self._not_loaded_restart != disk_hash:
            # containerd runs an older file than the one on disk (state lost, or an
            # offline merge without restart): restart once for this file, then retry.
            self._not_loaded_restart = disk_hash
            state.restart_pending = True
            report.requeue = True
        save_state(self.paths.state, state)
        report.event(outcome.reason, f"canary for {handler}: {outcome.message}", warning=True)
        return HandlerOutcome(
            "Failed", outcome.reason, outcome.message, generation, outcome.duration_seconds
        )

    # -- uninstall ---------------------------------------------------------------------

    def uninstall(self) -> list[str]:
        """Remove every table the agent owns, restart containerd once, delete the agent's
        files. Returns what was done; raises UninstallError when containerd would not
        come up without the tables (the file with them is put back)."""
        done: list[str] = []
        paths = self.paths
        state, _ = load_state(paths.state)
        sweep_temp_files(paths.config)
        removed, _ = self.canary.sweep()
        if removed:
            done.append(f"removed canary sandboxes {', '.join(removed)}")
        report = CycleReport()
        if paths.config.exists():
            original = read_config(paths.config)
            pristine = read_config(paths.pristine) if paths.pristine.exists() else None
            version = self._containerd_version_or_none()
            result = merge_config(
                original,
                {},
                state.owned,
                builtin_runtimes_for(version),
                pristine,
                fallback_version=config_version_for(version) if version else None,
                adopted=state.adopted,
            )
            delete = state.created_config and self._is_containerd_default(result.text)
            if result.changed(original) or delete:
                if delete:
                    paths.config.unlink()
                    done.append(f"deleted {paths.config} (the agent had created it)")
                else:
                    write_atomically(paths.config, result.text)
                    done.append(f"removed {', '.join(result.removed) or 'the agent'}'s tables")
                came_up, why = self._restart_and_wait(report, "uninstall")
                if not came_up:
                    write_atomically(paths.config, original, backup=False)
                    self._restart_and_wait(report, "rollback")
                    raise UninstallError(
                        f"containerd did not come up without the agent's tables ({why}); "
                        f"{paths.config} was put back as it was"
                    )
                done.append("restarted containerd")
            elif restart_reason(state, text_hash(original)):
                self._restart_and_wait(report, "recovery")
                done.append("restarted containerd (an earlier restart was unfinished)")
        for leftover in (paths.state, paths.pristine, paths.backup):
            if leftover.exists():
                leftover.unlink()
                done.append(f"deleted {leftover.name}")
        return done

    def _containerd_version_or_none(self) -> str | None:
        try:
            return self.host.containerd.version()
        except HostError:
            return None

    def _is_containerd_default(self, text: str) -> bool:
        try:
            return text == self.host.containerd.config_default()
        except HostError:
            return False


@dataclass
class _Cycle:
    """What one reconcile has learnt so far."""

    report: CycleReport
    facts: HostFacts
    state: AgentState
    original: str
    created: bool
    disk_hash: str | None
    result: MergeResult | None = None

    def require_result(self) -> MergeResult:
        if self.result is None:  # pragma: no cover - a programming error
            raise RuntimeError("merge result used before the merge")
        return self.result

    @property
    def changes_file(self) -> bool:
        """Whether the merge changes config.toml (a file the agent would only seed from
        containerd's defaults, with no table of its own, is not written)."""
        result = self.require_result()
        return result.changed(self.original) and not (self.created and not result.owned)


def _compact(table: Mapping[str, Any]) -> str:
    return json.dumps(table, sort_keys=True, separators=(",", ":"), default=str)


def _build(label: str) -> WindowsBuild:
    return WindowsBuild(int(label.rsplit(".", 1)[1]))


def _dumped_runtimes(effective: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(runtimes map, default runtime name) of a ``config dump``."""
    version = effective.get("version")
    path = RUNTIMES_PATH.get(version) if isinstance(version, int) else None
    if path is None:
        return None, None
    node: Any = effective
    for name in path[:-1]:
        node = node.get(name) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None, None
    runtimes = node.get(path[-1])
    default = node.get("default_runtime_name")
    return (
        runtimes if isinstance(runtimes, dict) else {},
        default if isinstance(default, str) else None,
    )
