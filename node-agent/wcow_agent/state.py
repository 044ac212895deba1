"""What the agent remembers on the node, next to config.toml.

``config.toml.wcow-state.json`` survives agent restarts and upgrades; it is what makes an
apply crash-safe (see ``apply.py``). Losing it is not fatal: ownership falls back to the
marker comment on each table, and the agent assumes containerd runs the file on disk.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wcow_agent.files import write_atomically

STATE_SUFFIX = ".wcow-state.json"
PRISTINE_SUFFIX = ".wcow-original"
BACKUP_SUFFIX = ".wcow-backup"
LOCK_SUFFIX = ".wcow-lock"


def text_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


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
        return self.config.with_name(self.config.name + suffix)


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
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

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

        raw_attempt = body.get("attempt")
        attempt: dict[str, Any] = raw_attempt if isinstance(raw_attempt, dict) else {}
        unproven = attempt.get("unproven")
        return cls(
            attempted_plan=str(attempt["plan"]) if isinstance(attempt.get("plan"), str) else None,
            attempt_grant=str(attempt["grant"]) if isinstance(attempt.get("grant"), str) else None,
            unproven=[str(h) for h in unproven] if isinstance(unproven, list) else [],
            applied_plan=optional("appliedPlan"),
            owned=strings("owned"),
            loaded=optional("loaded"),
            written=optional("written"),
            restart_pending=body.get("restartPending") is True,
            created_config=body.get("createdConfig") is True,
            rejected=strings("rejected"),
            canaried=strings("canaried"),
            canary_request=optional("canaryRequest"),
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


def save_state(path: Path, state: AgentState) -> None:
    write_atomically(path, state.to_json(), backup=False)
