"""The attempt: config.toml and containerd changed to a merged file as one transaction.

The order is what makes it crash-safe (the agent may be killed at any line; each state step
is ``StateJournal``'s, written before the next action):

1. the candidate file is checked by the node's own containerd (``config dump``) before
   anything is written: a file containerd cannot load never replaces the old one;
2. the state records the union of old and new ownership (so a table written in 3 is never
   mistaken for a user's table) and the hash of the new file (``intend``), then
3. config.toml is replaced atomically (temp file, flush, rename; the previous file is kept
   as ``config.toml.wcow-backup``), then
4. the state records "restart pending" before the restart, and "loaded" after containerd
   answers on CRI again.

A new agent that finds "restart pending", or a file it wrote that containerd never came up
with, restarts containerd before doing anything else (``recover``). If containerd does not
answer with the new file, the old file is put back, containerd restarted again, and the new
file's hash is remembered as rejected so the same file is never retried in a loop.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.files import read_config, write_atomically
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.state import Paths, StateJournal
from wcow_agent.cycle.decisions import CycleReport, HostFacts
from wcow_agent.host.interfaces import ContainerdError, Host, HostError
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

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
    """A merged config.toml to put in place of the file on disk."""

    result: MergeResult
    original: str
    """The file before: what a rollback writes back (containerd's defaults if created)."""
    created: bool
    """config.toml did not exist: a rollback deletes it again."""
    touched: list[str] = field(default_factory=list)
    """The eligible handlers whose table the change adds or rewrites."""

    @property
    def new_hash(self) -> str:
        return text_hash(self.result.text)

    def failed(self, reason: str, message: str) -> Failures:
        return dict.fromkeys(self.touched, (reason, message))


class Transaction:
    def __init__(self, host: Host, paths: Paths, restart: Restarter) -> None:
        self.host = host
        self.paths = paths
        self.restart = restart

    def run(
        self, report: CycleReport, journal: StateJournal, change: Change, facts: HostFacts
    ) -> Failures:
        """Write ``change`` and restart containerd, or leave everything as it was; returns
        the touched handlers whose change failed (none when containerd came up with it)."""
        rejected = journal.state.rejected.get(change.new_hash)
        if rejected is not None:
            report.result = "rejected"
            return change.failed("ConfigRejectedBefore", rejected)
        unreachable = self._cri_unreachable()
        if unreachable:
            # Judging a restart needs CRI: without it a healthy containerd would be restarted
            # and rolled back on every cycle (crictl missing, a wrong --cri-endpoint).
            report.result = "refused"
            report.event("CriUnreachable", unreachable, warning=True)
            return change.failed("CriUnreachable", unreachable)
        problem = self._preflight(change.result, facts)
        if problem:
            journal.reject(change.new_hash, problem)
            report.result = "rejected"
            report.event("ConfigRejected", problem, warning=True)
            return change.failed("ConfigRejected", problem)
        came_up, why = self._apply(report, journal, change)
        return {} if came_up else change.failed("ContainerdRolledBack", why)

    def recover(self, report: CycleReport, journal: StateJournal, disk_hash: str | None) -> None:
        """Finish a restart a killed agent began; if containerd will not come up with a
        file the agent wrote, go back to the backup."""
        state = journal.state
        report.event("RestartRecovery", "finishing a containerd restart an earlier run began")
        came_up, why = self.restart(report, "recovery")
        if came_up:
            journal.came_up(disk_hash or NO_FILE)
            return
        backup = self.paths.backup
        if disk_hash is not None and disk_hash == state.written and backup.exists():
            previous = read_config(backup)
            if text_hash(previous) != disk_hash:
                write_atomically(self.paths.config, previous, backup=False)
                journal.wrote_back(text_hash(previous), rejected=(disk_hash, why))
                report.result = "rolled_back"
                came_up, why = self.restart(report, "rollback")
                if came_up:
                    journal.came_up(text_hash(previous))
                    return
        report.result = "failed"
        report.event("ContainerdDown", f"containerd does not come up: {why}", warning=True)

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
        self, report: CycleReport, journal: StateJournal, change: Change
    ) -> tuple[bool, str]:
        paths, state, result = self.paths, journal.state, change.result
        owned_before = dict(state.owned)
        adopted_before = dict(state.adopted)
        if result.owned and not owned_before and not change.created and not paths.pristine.exists():
            # The file before the agent's first change: removing everything restores it.
            write_atomically(paths.pristine, change.original, backup=False)
        # Recorded before the write: if the agent dies after it, the next one finds a file
        # it wrote that containerd never loaded, and restarts containerd. The replaced
        # hand-written tables are kept before the file that loses them is written.
        journal.intend(
            {**owned_before, **result.owned},
            {**adopted_before, **result.adopted},
            change.created,
            change.new_hash,
        )
        write_atomically(paths.config, result.text, backup=not change.created)
        report.wrote = True
        journal.restart_begun()
        came_up, why = self.restart(report, "apply")
        if came_up:
            journal.applied(change.new_hash, result.owned, result.restored)
            if not result.owned:  # nothing of ours left: the next first change records anew
                paths.pristine.unlink(missing_ok=True)
            report.result = "applied"
            return True, ""
        self._roll_back(report, journal, change, (owned_before, adopted_before), why)
        return False, why

    def _roll_back(
        self,
        report: CycleReport,
        journal: StateJournal,
        change: Change,
        before: tuple[dict[str, str], dict[str, dict[str, Any]]],
        why: str,
    ) -> None:
        """Put the old file back (from memory: it is also the backup on disk) and restart
        containerd with it; ownership goes back to what it was."""
        report.result = "rolled_back"
        report.event(
            "ContainerdRollback",
            f"containerd did not come up with the new config.toml ({why}); restoring the "
            "previous file",
            warning=True,
        )
        journal.reject(change.new_hash, why)
        if change.created:
            self.paths.config.unlink(missing_ok=True)
            journal.wrote_back(None)
        else:
            write_atomically(self.paths.config, change.original, backup=False)
            journal.wrote_back(text_hash(change.original))
        back, why_back = self.restart(report, "rollback")
        if not back:
            report.event(
                "ContainerdDown",
                f"containerd did not come up with the previous config.toml either: {why_back}",
                warning=True,
            )
        written = journal.state.written
        journal.rolled_back(*before, loaded=(written or NO_FILE) if back else None)


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
