"""Proving: a canary for each applied handler whose table has not passed one yet.

A handler is Ready only once a sandbox started with it (``canary.py``); a table that passed
keeps its result until it changes, fails, is repaired after drift, or a canary is requested.
Canary sandboxes a killed agent left behind are swept before the next canary.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from wcow_agent.config.state import AgentState, StateJournal
from wcow_agent.cycle.canary import Canary, CanarySpec
from wcow_agent.cycle.decisions import (
    CycleReport,
    HandlerOutcome,
    canary_enabled,
    default_canary_image,
    guest_build_refusal,
    needs_canary,
)
from wcow_agent.cycle.transaction import Failures
from wcow_agent.host.interfaces import Host, HostError
from wcow_contract.wire.agent_status import HandlerState
from wcow_contract.wire.plan import PlanEntry


class Prover:
    def __init__(
        self,
        host: Host,
        canary: Canary,
        cancel: threading.Event | None,
        images: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.canary = canary
        self.cancel = cancel
        self.images = dict(images or {})
        """The agent's canary image per build (``--canary-image``): build -> reference."""
        self.swept = False
        """Leftover canary sandboxes were removed (again after a failed cleanup)."""
        self.may_restart = True
        """False (``--restart-mode none``): a handler containerd has not loaded waits for
        its owner's restart (``RestartRequired``) instead of the agent restarting it."""
        self._failed: set[str] = set()
        self._not_loaded_restart: str | None = None

    def sweep(self, report: CycleReport) -> None:
        removed, error = self.canary.sweep()
        if removed:
            report.event("CanaryLeftoversRemoved", f"removed canary sandboxes {', '.join(removed)}")
        self.swept = error is None

    def prove(
        self,
        report: CycleReport,
        journal: StateJournal,
        tables: Mapping[str, str],
        eligible: Mapping[str, PlanEntry],
        *,
        failed_apply: Failures,
        force: bool,
    ) -> None:
        """An outcome for each eligible handler not judged yet: a failed change, a carried
        or disabled canary, or a canary run now (all, when ``force``). ``tables``: handler
        -> hash of the table config.toml holds (the merge's ownership)."""
        outcomes = report.handlers if report.handlers is not None else {}
        pending = [h for h in sorted(eligible) if h not in outcomes]
        cri_ready: bool | None = None
        for handler in pending:
            entry, table = eligible[handler], tables.get(handler)
            forced = force or handler in report.drift_repaired
            outcome = self._without_canary(
                handler, entry, table, failed_apply=failed_apply, state=journal.state, forced=forced
            )
            if outcome is None or outcome.state == "Ready":
                outcome = self._guest_unsupported(report, entry, table) or outcome
            if outcome is None and table is not None:
                if cri_ready is None:
                    cri_ready = self._cri_ready(report, outcomes, pending, eligible)
                if not cri_ready:
                    break
                outcome = self._run(report, journal, handler, entry, table)
            if outcome is not None:
                outcomes[handler] = outcome
        report.handlers = outcomes

    def _without_canary(
        self,
        handler: str,
        entry: PlanEntry,
        table: str | None,
        *,
        failed_apply: Failures,
        state: AgentState,
        forced: bool,
    ) -> HandlerOutcome | None:
        """The outcome of a handler that needs no canary now, in this order: its change
        failed, it is not applied, its profile disables the canary, this very table passed
        one (and none is forced), the agent is stopping. None: run a canary."""
        generation = entry.generation
        if handler in failed_apply:
            reason, message = failed_apply[handler]
            return HandlerOutcome("Failed", reason, message, generation)
        if table is None:  # not applied (should not happen: merge owns what it wrote)
            return HandlerOutcome(
                "Failed", "NotApplied", "the table is not in config.toml", generation
            )
        if not canary_enabled(entry):
            return HandlerOutcome(
                "Ready", "CanaryDisabled", "applied; the profile disables the canary", generation
            )
        if not needs_canary(handler, table, state, forced, handler in self._failed):
            return HandlerOutcome("Ready", "CanaryPassed", "", generation, carried=True)
        if self.cancel is not None and self.cancel.is_set():
            return HandlerOutcome(
                "Pending", "AgentStopping", "the agent stopped before the canary", generation
            )
        return None

    @staticmethod
    def _guest_unsupported(
        report: CycleReport, entry: PlanEntry, table: str | None
    ) -> HandlerOutcome | None:
        """A handler whose pods this node's pause image cannot start (a Hyper-V guest build
        it does not boot, a process class on a pause image of another build) is not ready
        here, canary or not (no canary is spent)."""
        refusal = guest_build_refusal(
            entry,
            report.pause_image,
            report.guest_builds,
            pause_build=report.pause_build,
            host_build=report.facts.build if report.facts is not None else None,
        )
        if refusal is None or table is None:
            return None
        return HandlerOutcome("Failed", *refusal, generation=entry.generation)

    def _cri_ready(
        self,
        report: CycleReport,
        outcomes: dict[str, HandlerOutcome],
        pending: list[str],
        eligible: Mapping[str, PlanEntry],
    ) -> bool:
        """Whether CRI can run a canary now; when not, every pending handler says why."""
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
                handler, HandlerOutcome(state, reason, message, eligible[handler].generation)
            )
        return False

    def _run(
        self,
        report: CycleReport,
        journal: StateJournal,
        handler: str,
        entry: PlanEntry,
        table: str,
    ) -> HandlerOutcome:
        generation = entry.generation
        host_build = report.facts.build if report.facts is not None else None
        image = default_canary_image(entry, host_build, self.images)
        outcome = self.canary.run(CanarySpec.from_plan(handler, entry, image), self.cancel)
        report.canaries.append(outcome)
        if outcome.cleanup_error:
            self.swept = False  # sweep again next cycle
        if outcome.passed:
            self._failed.discard(handler)
            journal.canary_passed(handler, table)
            return HandlerOutcome(
                "Ready", outcome.reason, outcome.message, generation, outcome.duration_seconds
            )
        if outcome.reason == "CanaryCancelled":
            return HandlerOutcome("Pending", "AgentStopping", outcome.message, generation)
        if outcome.reason == "RuntimeNotLoaded" and not self.may_restart:
            return HandlerOutcome(
                "Pending", "RestartRequired", outcome.message, generation, outcome.duration_seconds
            )
        self._failed.add(handler)
        state = journal.state
        disk_hash = state.written or state.loaded
        restart = outcome.reason == "RuntimeNotLoaded" and self._not_loaded_restart != disk_hash
        if restart:
            # containerd runs an older file than the one on disk (state lost, or an
            # offline merge without restart): restart once for this file, then retry.
            self._not_loaded_restart = disk_hash
            report.requeue = True
        journal.canary_failed(handler, restart)
        report.event(outcome.reason, f"canary for {handler}: {outcome.message}", warning=True)
        return HandlerOutcome(
            "Failed", outcome.reason, outcome.message, generation, outcome.duration_seconds
        )
