"""What the state remembers of where the agent put its handlers, so that a later cycle (a
change of placement) or ``uninstall`` undoes exactly that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wcow_agent.config.placement import WAYS, Way


@dataclass(frozen=True)
class PlacementRecord:
    way: Way
    target: str
    """The file that holds the agent's tables (local path): the root, drop-in or template."""
    version: int = 0
    """The schema its tables were written in."""
    import_added: str | None = None
    """The import entry the agent added to the root for its drop-in folder."""
    line_added: bool = False
    """The root had no ``imports`` at all: the agent added the whole line."""
    created: bool = False
    """The agent created ``target`` (a drop-in always; a template where none was)."""
    folder_created: bool = False
    """The agent created the drop-in folder: it goes when it is left empty."""

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"way": self.way, "target": self.target, "version": self.version}
        if self.import_added is not None:
            body["importAdded"] = self.import_added
            body["lineAdded"] = self.line_added
        if self.created:
            body["created"] = True
        if self.folder_created:
            body["folderCreated"] = True
        return body

    @classmethod
    def from_json(cls, body: object) -> PlacementRecord | None:
        if not isinstance(body, dict) or body.get("way") not in WAYS:
            return None
        target, version = body.get("target"), body.get("version")
        imported = body.get("importAdded")
        return cls(
            way=body["way"],
            target=target if isinstance(target, str) else "",
            version=version if isinstance(version, int) else 0,
            import_added=imported if isinstance(imported, str) else None,
            line_added=body.get("lineAdded") is True,
            created=body.get("created") is True,
            folder_created=body.get("folderCreated") is True,
        )


@dataclass(frozen=True)
class Undo:
    """What a change in flight replaces: the placement before it, and each file it writes
    (local path -> whether it existed: its backup is restored, or it is deleted)."""

    placement: PlacementRecord | None
    files: dict[str, bool]

    def as_json(self) -> dict[str, Any]:
        return {
            "placement": None if self.placement is None else self.placement.as_json(),
            "files": self.files,
        }

    @classmethod
    def from_json(cls, body: object) -> Undo | None:
        if not isinstance(body, dict) or not isinstance(body.get("files"), dict):
            return None
        files = {str(k): v is True for k, v in body["files"].items()}
        return cls(PlacementRecord.from_json(body.get("placement")), files)
