"""The attempt: containerd's configuration files and containerd changed as one transaction.

A change writes one file or several (config.toml, the agent's drop-in and the root's import
of it, the template; the old place of handlers that move). The order is what makes it
crash-safe (the agent may be killed at any line; each state step is ``StateJournal``'s,
written before the next action):

1. the candidate configuration is checked by the node's own containerd (``config dump``,
   ``config/candidate.py``) before anything is written: a configuration containerd cannot
   load never replaces the old one;
2. the state records the union of old and new ownership (so a table written in 3 is never
   mistaken for a user's table), the hash of the new configuration, where the handlers will
   be and what each file was (``intend``, ``Undo``), then
3. every file is replaced atomically (temp file, flush, rename; the previous one kept as
   ``<name>.wcow-backup``; a deleted file is kept the same way first), then
4. the state records "restart pending" before the one restart, and "loaded" after
   containerd answers on CRI again.

A new agent that finds "restart pending", or files it wrote that containerd never came up
with, restarts containerd before doing anything else (``recover``). If containerd does not
answer with the new configuration, every file is put back, containerd restarted again, and
the new configuration's hash is remembered as rejected so it is never retried in a loop.

``--restart-mode none`` (the node's owner restarts containerd): steps 1 to 3 only; the
handlers are reported ``RestartRequired`` until containerd is seen running them
(``cycle/restart_wait.py``), and there is nothing to roll back to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.file_writes import (
    drop_leftovers,
    keep_pristine,
    restore_backups,
    restore_edits,
    write_edits,
)
from wcow_agent.config.files import read_config, write_atomically
from wcow_agent.config.layout import RestartMode
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.node_config import NodeFiles, read_or_none
from wcow_agent.config.placed import Placed
from wcow_agent.config.placement_record import PlacementRecord, Undo
from wcow_agent.config.state import Paths, StateJournal
from wcow_agent.config.template import agent_handlers
from wcow_agent.cycle.decisions import CycleReport, HostFacts
from wcow_agent.cycle.preflight import preflight
from wcow_agent.host.interfaces import Host, HostError

CRI_POLL_SECONDS = 2.0
NO_FILE = "none"  # state.loaded when containerd runs without a config.toml

Failures = dict[str, tuple[str, str]]  # handler -> (reason, message) of a change that failed


@dataclass(frozen=True)
class Timeouts:
    restart: float = 120.0
    """How long containerd may take to restart and answer on CRI."""
    cri_poll: float = CRI_POLL_SECONDS


@dataclass
class Restarter:
    """Restart containerd and wait until it answers on CRI with RuntimeReady. Not cancelled
    by a stop request: a half-done restart is worse than a late exit."""

    host: Host
    timeouts: Timeouts
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __call__(self, report: CycleReport, reason: str) -> tuple[bool, str]:
        """(came up, why not); ``reason`` is recorded in ``report.restarts``."""
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


@dataclass(frozen=True)
class Change:
    """The node's configuration files to put in place of those on disk."""

    placed: Placed
    original: str
    """config.toml before: what a rollback writes back (containerd's defaults if created)."""
    created: bool
    """config.toml did not exist: a rollback deletes it again."""
    touched: list[str] = field(default_factory=list)
    """The eligible handlers whose table the change adds or rewrites."""

    @property
    def result(self) -> MergeResult:
        return self.placed.result

    @property
    def new_hash(self) -> str:
        return self.placed.config_hash

    def failed(self, reason: str, message: str) -> Failures:
        return dict.fromkeys(self.touched, (reason, message))


class Transaction:
    def __init__(
        self,
        host: Host,
        paths: Paths,
        restart: Restarter,
        files: NodeFiles,
        restart_mode: RestartMode = "service",
    ) -> None:
        self.host = host
        self.paths = paths
        self.restart = restart
        self.files = files
        self.restart_mode = restart_mode

    def run(
        self, report: CycleReport, journal: StateJournal, change: Change, facts: HostFacts
    ) -> Failures:
        """Write ``change`` and restart containerd, or leave everything as it was; returns
        the touched handlers whose change failed (none when containerd came up with it)."""
        rejected = journal.state.rejected.get(change.new_hash)
        if rejected is not None:
            report.result = "rejected"
            return change.failed("ConfigRejectedBefore", rejected)
        unreachable = self._cri_unreachable() if self.restart_mode != "none" else None
        if unreachable:
            # Judging a restart needs CRI: without it a healthy containerd would be restarted
            # and rolled back on every cycle (crictl missing, a wrong --cri-endpoint).
            report.result = "refused"
            report.event("CriUnreachable", unreachable, warning=True)
            return change.failed("CriUnreachable", unreachable)
        problem = preflight(self.host, self.files, change.placed, facts)
        if problem:
            journal.reject(change.new_hash, problem)
            report.result = "rejected"
            report.event("ConfigRejected", problem, warning=True)
            return change.failed("ConfigRejected", problem)
        came_up, why = self._apply(report, journal, change)
        return {} if came_up else change.failed("ContainerdRolledBack", why)

    def disk_hash(self, record: PlacementRecord | None) -> str | None:
        """The configuration on disk now, as the agent keeps it (``record``'s files)."""
        return self.files.disk_hash(read_or_none(self.paths.config), record)

    def recover(self, report: CycleReport, journal: StateJournal, disk_hash: str | None) -> None:
        """Finish a restart a killed agent began; if containerd will not come up with the
        files the agent wrote, go back to their backups."""
        state = journal.state
        report.event("RestartRecovery", "finishing a containerd restart an earlier run began")
        came_up, why = self.restart(report, "recovery")
        if came_up:
            journal.came_up(self.disk_hash(state.placement) or NO_FILE)
            return
        if disk_hash is not None and disk_hash == state.written:
            previous = self._restore_backups(state.undo)
            if previous is not None and previous != disk_hash:
                journal.wrote_back(previous, rejected=(disk_hash, why))
                report.result = "rolled_back"
                came_up, why = self.restart(report, "rollback")
                if came_up:
                    journal.came_up(previous)
                    return
        report.result = "failed"
        report.event("ContainerdDown", f"containerd does not come up: {why}", warning=True)

    def _restore_backups(self, undo: Undo | None) -> str | None:
        """The files as before the change in flight (from their backups): their hash."""
        if undo is not None:
            restore_backups(undo.files)
            return self.disk_hash(undo.placement)
        backup = self.paths.backup  # a state from before placements were recorded
        if not backup.exists():
            return None
        previous = read_config(backup)
        write_atomically(self.paths.config, previous, backup=False)
        return text_hash(previous)

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

    def _apply(
        self, report: CycleReport, journal: StateJournal, change: Change
    ) -> tuple[bool, str]:
        state, placed, result = journal.state, change.placed, change.result
        owned_before = dict(state.owned)
        adopted_before = dict(state.adopted)
        edits = placed.edits()
        keep_pristine(edits, placed.held_before)
        # Recorded before the write: if the agent dies after it, the next one finds files
        # it wrote that containerd never loaded, and restarts containerd. The replaced
        # hand-written tables are kept before the file that loses them is written.
        undo = Undo(state.placement, {str(e.path): e.before is not None for e in edits})
        journal.intend(
            {**owned_before, **result.owned},
            {**adopted_before, **result.adopted},
            change.created,
            change.new_hash,
            (placed.record, placed.adopted_from, undo),
        )
        write_edits(edits)
        report.wrote = True
        if self.restart_mode == "none":
            journal.written_unloaded(result.owned, result.restored, placed.adopted_from)
            self._settled(placed, edits)
            report.result = "restart_required"
            return True, ""
        journal.restart_begun()
        came_up, why = self.restart(report, "apply")
        if came_up:
            why = self._rendered_problem(placed)
            came_up = not why
        if came_up:
            loaded = self.disk_hash(placed.record) or change.new_hash
            journal.applied(loaded, result.owned, result.restored, placed.adopted_from)
            self._settled(placed, edits)
            report.result = "applied"
            return True, ""
        self._roll_back(report, journal, change, (owned_before, adopted_before), why)
        return False, why

    def _settled(self, placed: Placed, edits: list[Any]) -> None:
        """The change is the node's now: files that hold nothing of the agent's lose their
        original and backup, folders the agent created go when left empty."""
        vacated = [e.path for e in edits if e.path not in placed.holds_after]
        gone = [e.path for e in edits if e.after is None]
        drop_leftovers(vacated, gone, placed.folders)

    def _rendered_problem(self, placed: Placed) -> str:
        """On a template node: config.toml as rendered after the restart carries the
        agent's handlers (else the distribution did not render from the template)."""
        if placed.placement.way != "template":
            return ""
        rendered = read_or_none(self.paths.config) or ""
        missing = sorted(set(placed.result.owned) - agent_handlers(rendered))
        if not missing:
            return ""
        return (
            f"after the restart {self.paths.config} does not carry handler(s) "
            f"{', '.join(missing)} from {placed.placement.target}: the distribution did not "
            "render config.toml from that template (check --config-template)"
        )

    def _roll_back(
        self,
        report: CycleReport,
        journal: StateJournal,
        change: Change,
        before: tuple[dict[str, str], dict[str, dict[str, Any]]],
        why: str,
    ) -> None:
        """Put every file back (from memory: they are also the backups on disk) and restart
        containerd with them; ownership goes back to what it was."""
        report.result = "rolled_back"
        report.event(
            "ContainerdRollback",
            f"containerd did not come up with the new config.toml ({why}); restoring the "
            "previous file",
            warning=True,
        )
        journal.reject(change.new_hash, why)
        undo = journal.state.undo
        restore_edits(change.placed.edits())
        journal.wrote_back(self.disk_hash(undo.placement if undo is not None else None))
        back, why_back = self.restart(report, "rollback")
        if not back:
            report.event(
                "ContainerdDown",
                f"containerd did not come up with the previous config.toml either: {why_back}",
                warning=True,
            )
        written = journal.state.written
        journal.rolled_back(*before, loaded=(written or NO_FILE) if back else None)
