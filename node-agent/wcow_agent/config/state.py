"""What the agent remembers on the node, next to config.toml.

``config.toml.wcow-state.json`` survives agent restarts and upgrades; it is what makes an
apply crash-safe (see ``cycle/transaction.py``). Losing it is not fatal: ownership falls back to the
marker comment on each table, and the agent assumes containerd runs the file on disk.

Every change is one of ``StateJournal``'s named steps, and its ``_write`` is the one place
the file is written: what an agent killed at any line leaves behind is one of those steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wcow_agent.config.files import write_atomically
from wcow_agent.config.placement_record import PlacementRecord, Undo

STATE_SUFFIX = ".wcow-state.json"
PRISTINE_SUFFIX = ".wcow-original"
BACKUP_SUFFIX = ".wcow-backup"
LOCK_SUFFIX = ".wcow-lock"


def beside(path: Path, suffix: str) -> Path:
    """A file the agent keeps beside one of containerd's (``.wcow-original``, ...)."""
    return path.with_name(path.name + suffix)


@dataclass(frozen=True)
class Paths:
    """The files the agent keeps beside containerd's config.toml."""

    config: Path
    state_override: Path | None = None

    @property
    def state(self) -> Path:
        return self.state_override or self._beside(STATE_SUFFIX)

    @property
    def pristine(self) -> Path:
        return self._beside(PRISTINE_SUFFIX)

    @property
    def backup(self) -> Path:
        return self._beside(BACKUP_SUFFIX)

    @property
    def lock(self) -> Path:
        return self._beside(LOCK_SUFFIX)

    def _beside(self, suffix: str) -> Path:
        return beside(self.config, suffix)


@dataclass(frozen=True)
class PauseChange:
    """A pause image change the agent made on this node (``--pause-image``), held until it
    is proven: containerd came up with it and every handler that was Ready before passed a
    canary after it. The agent's readiness stays false meanwhile (``cycle/pause_change.py``)."""

    target: str | None
    """The value the change sets (None: the key removed, containerd's default)."""
    source: str | None
    """The value it replaces: what a rollback writes back."""
    baseline: tuple[str, ...]
    """The handlers that were Ready (their table's canary passed) before the change."""
    phase: str = "applying"
    """applying (not yet loaded) | proving (loaded, canaries due) | failed."""
    reason: str = ""
    """Why it failed (phase failed)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "from": self.source,
            "baseline": list(self.baseline),
            "phase": self.phase,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, body: object) -> PauseChange | None:
        if not isinstance(body, dict) or body.get("phase") not in PAUSE_PHASES:
            return None
        baseline = body.get("baseline")

        def image(key: str) -> str | None:
            value = body.get(key)
            return value if isinstance(value, str) else None

        return cls(
            image("target"),
            image("from"),
            tuple(str(h) for h in baseline) if isinstance(baseline, list) else (),
            str(body["phase"]),
            str(body.get("reason") or ""),
        )


PAUSE_PHASES = ("applying", "proving", "failed")


@dataclass
class AgentState:
    owned: dict[str, str] = field(default_factory=dict)
    """handler -> hash of the table written ("seeded" for containerd's defaults)."""
    loaded: str | None = None
    """Hash of the config.toml text containerd last came up with; None: not known yet."""
    written: str | None = None
    """Hash of the config.toml text the agent last wrote."""
    restart_pending: bool = False
    """A restart was started and not confirmed: the next start restarts again."""
    created_config: bool = False
    """config.toml did not exist; the agent seeded it from ``containerd config default``."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Hash of a config.toml text containerd did not come up with -> why. Never retried."""
    canaried: dict[str, str] = field(default_factory=dict)
    """handler -> hash of the table whose canary passed."""
    canary_request: str | None = None
    """The last on-demand canary request (Node annotation) already served."""
    adopted: dict[str, dict[str, Any]] = field(default_factory=dict)
    """handler -> the hand-written table the agent took over (``--adopt-handlers``): the
    backup that is written back when the agent lets go of the handler."""
    attempted_plan: str | None = None
    """Hash of the plan the agent last began to change config.toml to (or adopted)."""
    attempt_grant: str | None = None
    """The rollout permission (grant time) that attempt began under; None: not paced."""
    unproven: list[str] = field(default_factory=list)
    """Handlers the attempt changed whose canary has not passed yet; when none are left,
    the attempted plan is the applied one."""
    applied_plan: str | None = None
    """Hash of the last plan applied with every handler it changed proven."""
    pause_held: bool = False
    """The agent set config.toml's pause image key (``--pause-image``)."""
    pause_previous: str | None = None
    """What that key held before the agent first set it (None: it was absent): written
    back when the agent lets go (the flag dropped, ``uninstall``)."""
    pause_change: PauseChange | None = None
    """A pause image change not proven yet, or failed (``cycle/pause_change.py``)."""
    placement: PlacementRecord | None = None
    """Where the agent's handlers are (None: merged into config.toml, as before placements
    were recorded, or nowhere)."""
    adopted_from: dict[str, str] = field(default_factory=dict)
    """handler -> the file an adopted table was taken out of (absent: config.toml itself)."""
    undo: Undo | None = None
    """The change in flight (written, not yet loaded): what a recovery puts back."""

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "owned": self.owned,
            "loaded": self.loaded,
            "written": self.written,
            "restartPending": self.restart_pending,
            "createdConfig": self.created_config,
            "rejected": self.rejected,
            "canaried": self.canaried,
            "canaryRequest": self.canary_request,
        }
        if self.adopted:
            body["adopted"] = self.adopted
        if self.attempted_plan is not None:
            body["attempt"] = {
                "plan": self.attempted_plan,
                "grant": self.attempt_grant,
                "unproven": self.unproven,
            }
        if self.applied_plan is not None:
            body["appliedPlan"] = self.applied_plan
        if self.pause_held:
            body["pauseImage"] = {"previous": self.pause_previous}
        if self.pause_change is not None:
            body["pauseChange"] = self.pause_change.as_json()
        self._placement_json(body)
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    def _placement_json(self, body: dict[str, Any]) -> None:
        if self.placement is not None:
            body["placement"] = self.placement.as_json()
        if self.adopted_from:
            body["adoptedFrom"] = self.adopted_from
        if self.undo is not None:
            body["undo"] = self.undo.as_json()

    @classmethod
    def from_json(cls, text: str) -> AgentState:
        body = json.loads(text)
        if not isinstance(body, dict):
            raise TypeError("state file is not a JSON object")

        def strings(key: str) -> dict[str, str]:
            value = body.get(key) or {}
            return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

        def optional(key: str) -> str | None:
            value = body.get(key)
            return str(value) if isinstance(value, str) else None

        raw_pause = body.get("pauseImage")
        pause: dict[str, Any] | None = raw_pause if isinstance(raw_pause, dict) else None
        previous = pause.get("previous") if pause is not None else None
        adopted_from = body.get("adoptedFrom")
        raw_attempt = body.get("attempt")
        attempt: dict[str, Any] = raw_attempt if isinstance(raw_attempt, dict) else {}
        unproven = attempt.get("unproven")
        return cls(
            attempted_plan=str(attempt["plan"]) if isinstance(attempt.get("plan"), str) else None,
            attempt_grant=str(attempt["grant"]) if isinstance(attempt.get("grant"), str) else None,
            unproven=[str(h) for h in unproven] if isinstance(unproven, list) else [],
            applied_plan=optional("appliedPlan"),
            pause_held=pause is not None,
            pause_previous=previous if isinstance(previous, str) else None,
            pause_change=PauseChange.from_json(body.get("pauseChange")),
            owned=strings("owned"),
            loaded=optional("loaded"),
            written=optional("written"),
            restart_pending=body.get("restartPending") is True,
            created_config=body.get("createdConfig") is True,
            rejected=strings("rejected"),
            canaried=strings("canaried"),
            canary_request=optional("canaryRequest"),
            placement=PlacementRecord.from_json(body.get("placement")),
            adopted_from={str(k): str(v) for k, v in adopted_from.items()}
            if isinstance(adopted_from, dict)
            else {},
            undo=Undo.from_json(body.get("undo")),
            adopted={
                str(handler): dict(table)
                for handler, table in (body.get("adopted") or {}).items()
                if isinstance(table, dict)
            }
            if isinstance(body.get("adopted"), dict)
            else {},
        )


def load_state(path: Path) -> tuple[AgentState, str | None]:
    """The state, and a warning when the file was unreadable (then: an empty state)."""
    if not path.exists():
        return AgentState(), None
    try:
        return AgentState.from_json(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError, TypeError) as error:
        return AgentState(), f"ignoring unreadable state file {path}: {error}"


class StateJournal:
    """The state of one cycle (or one command), changed only through the steps below, each
    written to disk before it returns."""

    def __init__(self, path: Path, state: AgentState) -> None:
        self.path = path
        self.state = state

    @classmethod
    def load(cls, path: Path) -> tuple[StateJournal, str | None]:
        """The journal of the state on disk, and a warning when that was unreadable."""
        state, warning = load_state(path)
        return cls(path, state), warning

    def _write(self) -> None:
        write_atomically(self.path, self.state.to_json(), backup=False)

    # -- what containerd runs --------------------------------------------------------

    def containerd_runs(self, text_hash: str) -> None:
        """What containerd runs, as found (first contact, or a file someone else wrote)."""
        self.state.loaded = text_hash
        self._write()

    def came_up(self, text_hash: str) -> None:
        """containerd answered after a restart, running this file."""
        self.state.loaded = text_hash
        self.state.restart_pending = False
        self._write()

    # -- the transaction (cycle/transaction.py) --------------------------------------

    def intend(
        self,
        owned: Mapping[str, str],
        adopted: Mapping[str, dict[str, Any]],
        created: bool,
        written: str,
        where: tuple[PlacementRecord | None, Mapping[str, str], Undo] | None = None,
    ) -> None:
        """Before config.toml is replaced: the union of old and new ownership (a table
        written is never mistaken for a user's), the replaced hand-written tables, and the
        hash of the file about to be written. ``where``: the placement after the change,
        where adopted tables came from, and what the change replaces (``Undo``)."""
        self.state.owned = dict(owned)
        self.state.adopted = dict(adopted)
        self.state.created_config = self.state.created_config or created
        self.state.written = written
        if where is not None:
            placement, adopted_from, undo = where
            self.state.placement = placement
            self.state.adopted_from = {**self.state.adopted_from, **adopted_from}
            self.state.undo = undo
        self._write()

    def restart_begun(self) -> None:
        """The new file is on disk; containerd is about to restart (``recovery`` if the
        agent dies before ``came_up``)."""
        self.state.restart_pending = True
        self._write()

    def applied(
        self,
        loaded: str,
        owned: Mapping[str, str],
        restored: Iterable[str],
        adopted_from: Mapping[str, str] | None = None,
    ) -> None:
        """containerd came up with the new file: it owns what the merge wrote, and the
        hand-written tables it gave back are no longer kept (nor where they came from)."""
        self.state.loaded = loaded
        self.state.restart_pending = False
        self.state.owned = dict(owned)
        for handler in restored:
            self.state.adopted.pop(handler, None)
        if adopted_from is not None:
            self.state.adopted_from = dict(adopted_from)
        self.state.undo = None
        self._write()

    def written_unloaded(
        self, owned: Mapping[str, str], restored: Iterable[str], adopted_from: Mapping[str, str]
    ) -> None:
        """``--restart-mode none``: the files are written and containerd was not restarted;
        they are the agent's now (there is nothing to roll back to once its owner restarts
        containerd), and ``loaded`` stays until containerd is seen running them."""
        self.state.owned = dict(owned)
        for handler in restored:
            self.state.adopted.pop(handler, None)
        self.state.adopted_from = dict(adopted_from)
        self.state.undo = None
        self._write()

    def reject(self, text_hash: str, why: str) -> None:
        """containerd will not run this file: never try it again (unless let in anew)."""
        self.state.rejected[text_hash] = why
        self._write()

    def wrote_back(self, written: str | None, rejected: tuple[str, str] | None = None) -> None:
        """The previous file is on disk again (None: the agent's own file is gone), and,
        from a recovery, the file that did not come up (hash, why)."""
        if rejected is not None:
            self.state.rejected[rejected[0]] = rejected[1]
            self._undone()
        self.state.written = written
        self._write()

    def rolled_back(
        self, owned: Mapping[str, str], adopted: Mapping[str, dict[str, Any]], loaded: str | None
    ) -> None:
        """After a rollback: ownership as before the attempt; what containerd runs when it
        came up with the previous file (None: it did not)."""
        self.state.owned = dict(owned)
        self.state.adopted = dict(adopted)
        if loaded is not None:
            self.state.loaded = loaded
            self.state.restart_pending = False
        self._undone()
        self._write()

    def _undone(self) -> None:
        """The files are back as before the change: so is where the handlers are."""
        if self.state.undo is not None:
            self.state.placement = self.state.undo.placement
            self.state.undo = None

    def merged_offline(
        self,
        owned: Mapping[str, str],
        adopted: Mapping[str, dict[str, Any]],
        where: tuple[PlacementRecord | None, Mapping[str, str]] | None = None,
    ) -> None:
        """``merge --write``: the tables written without a restart (containerd has not
        loaded them: a running agent finds out at its next canary); ``where``: the
        placement and where adopted tables came from."""
        self.state.owned = dict(owned)
        self.state.adopted = dict(adopted)
        if where is not None:
            self.state.placement, adopted_from = where
            self.state.adopted_from = dict(adopted_from)
        self._write()

    # -- the attempt at a plan (cycle/rollout_gate.py) -------------------------------

    def attempt_begun(
        self, plan: str, grant: str | None, unproven: list[str], retry: str | None
    ) -> None:
        """The node starts changing to ``plan`` under ``grant``; ``retry``: a file rejected
        under an earlier permission for this plan, tried once more."""
        if retry is not None:
            self.state.rejected.pop(retry, None)
        self.state.attempted_plan, self.state.attempt_grant = plan, grant
        self.state.unproven = unproven
        self._write()

    def attempt_widened(self, unproven: list[str]) -> None:
        self.state.unproven = unproven
        self._write()

    def plan_taken(self, plan: str) -> None:
        """A plan that leaves config.toml as it is, taken without an attempt."""
        self.state.unproven = []
        self.state.attempted_plan, self.state.attempt_grant = plan, None
        self._write()

    def attempt_settled(self, unproven: list[str], applied: str | None) -> None:
        self.state.unproven, self.state.applied_plan = unproven, applied
        self._write()

    # -- the pause image (cycle/pause_change.py, --pause-image) -----------------------

    def pause_image_held(self, previous: str | None) -> None:
        """Before the agent first writes the pause image key: what it held (None: absent)."""
        self.state.pause_held, self.state.pause_previous = True, previous
        self._write()

    def pause_image_released(self) -> None:
        """The key holds what it held before the agent: nothing of it is the agent's."""
        self.state.pause_held, self.state.pause_previous = False, None
        self._write()

    def pause_change_begun(self, change: PauseChange, file: str) -> None:
        """Before a pause image change is written: what it sets, replaces, must keep. The
        flag set anew is a new try: a file with it that containerd refused before is tried
        once more (``file``: its hash)."""
        self.state.pause_change = change
        self.state.rejected.pop(file, None)
        self._write()

    def pause_change_phase(self, phase: str, reason: str = "") -> None:
        if self.state.pause_change is not None:
            self.state.pause_change = replace(self.state.pause_change, phase=phase, reason=reason)
            self._write()

    def pause_change_ended(self) -> None:
        """Proven, or given up for another value of the flag: readiness is free again."""
        if self.state.pause_change is not None:
            self.state.pause_change = None
            self._write()

    def canaries_void(self) -> None:
        """containerd restarted with another pause image: every sandbox starts from it now,
        so no earlier canary holds (written before the canaries run: an agent killed in
        between proves them all again)."""
        if self.state.canaried:
            self.state.canaried = {}
            self._write()

    # -- canaries (cycle/proving.py) ---------------------------------------------------

    def canary_passed(self, handler: str, table: str) -> None:
        self.state.canaried[handler] = table
        self._write()

    def canary_failed(self, handler: str, restart: bool) -> None:
        """``restart``: containerd runs an older file than the one on disk; restart it."""
        self.state.canaried.pop(handler, None)
        self.state.restart_pending = self.state.restart_pending or restart
        self._write()

    def canary_request_served(self, request: str | None) -> None:
        self.state.canary_request = request
        self._write()
