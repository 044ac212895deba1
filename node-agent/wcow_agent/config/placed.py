"""What a placement works on and gives (``placing.place_handlers``): the agent's memory of
its handlers (``Ownership``), the node's files (``NodeConfig``), and the change (``Placed``):
the handlers' bookkeeping, every file it writes, where the handlers are after it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wcow_agent.config import toml_text
from wcow_agent.config.file_set import FileEdit, configuration_hash
from wcow_agent.config.imports import LoadedFile, LoadOrder
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.placement import Placement
from wcow_agent.config.placement_record import PlacementRecord

Tables = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Ownership:
    """What the agent remembers of its handlers on this node (its state)."""

    owned: Mapping[str, str] = field(default_factory=dict)
    adopted: Tables = field(default_factory=dict)
    adopted_from: Mapping[str, str] = field(default_factory=dict)
    """handler -> the file (as containerd names it) an adopted table was taken out of;
    absent: adopted in place, in the root (merge)."""
    record: PlacementRecord | None = None


@dataclass(frozen=True)
class NodeConfig:
    """The node's files as the agent read them."""

    root: LoadedFile
    """containerd's root config (on a template node: config.toml as rendered)."""
    created: bool
    """There is no root file: ``root`` holds containerd's defaults."""
    order: LoadOrder
    """What containerd loads for the root, the agent's own drop-in left out."""
    texts: Mapping[Path, str | None] = field(default_factory=dict)
    """Other files the change may touch (the drop-in, the template, their old places)."""
    pristine: Mapping[Path, str] = field(default_factory=dict)
    """Files as they were before the agent first changed them (``.wcow-original``)."""
    folder_missing: bool = False
    """The drop-in folder does not exist yet: writing the drop-in creates it."""


@dataclass(frozen=True)
class Settings:
    builtins: Tables = field(default_factory=dict)
    """containerd 1.x's built-in runtimes, seeded into a schema 1 or 2 root."""
    fallback_version: int | None = None
    adopt: Collection[str] = ()
    parse: toml_text.Parse = tomllib.loads


@dataclass(frozen=True)
class Placed:
    placement: Placement
    result: MergeResult
    """The handlers' bookkeeping at their place; ``text``: the root file after."""
    root: LoadedFile
    created: bool
    others: tuple[FileEdit, ...]
    """Every other file the change writes or deletes."""
    record: PlacementRecord | None
    """Where the agent's handlers are after the change (None: nowhere)."""
    adopted_from: Mapping[str, str]
    moved: tuple[str, ...] = ()
    """Handlers that only changed place (the same table, another file)."""
    rendered: str | None = None
    """Template nodes: config.toml as rke2 will render it from the new template."""
    held_before: frozenset[Path] = frozenset()
    """Files that held something of the agent's before the change (their original is kept
    already)."""
    holds_after: frozenset[Path] = frozenset()
    """Files that hold something of the agent's after it."""
    folders: tuple[Path, ...] = ()
    """Folders the agent created that the change may leave empty (removed then)."""

    @property
    def root_edit(self) -> FileEdit:
        before = None if self.created else self.root.text
        return FileEdit(self.root.local, before, self.result.text, "config")

    def edits(self) -> list[FileEdit]:
        """Every file the change writes (the root first), unchanged ones left out. A root
        that only holds containerd's defaults is not created for nothing of the agent's."""
        root = self.root_edit
        seeded_only = self.created and not self.result.owned and self.record is None
        rendered = self.placement.way == "template"  # the distribution writes config.toml
        edits = [root] if root.changed and not seeded_only and not rendered else []
        return edits + [edit for edit in self.others if edit.changed]

    def changed(self) -> bool:
        return bool(self.edits())

    def kept_files(self) -> dict[str, str | None]:
        """The agent's own files after the change (drop-in or template), for the hash."""
        if self.record is None or self.record.way == "merge":
            return {}
        after = {str(edit.path): edit.after for edit in self.others}
        return {self.record.target: after.get(self.record.target)}

    @property
    def config_hash(self) -> str:
        return configuration_hash(self.result.text, self.kept_files())
