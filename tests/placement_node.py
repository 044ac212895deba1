"""A node's containerd files laid out where its distribution keeps them (its drives as
folders: ``DriveMappedPaths``), the agent's placement applied and removed the way the
transaction writes files (originals kept, every file atomic, leftovers dropped), without a
host; and a view of the root that containerd's own loader, run on Linux, can follow."""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from wcow_agent.config.file_writes import drop_leftovers, keep_pristine, write_edits
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.node_paths import DriveMappedPaths
from wcow_agent.config.placed import Placed
from wcow_agent.config.state import AgentState
from wcow_agent.cycle.handler_placement import NodeText, place_on_node


@dataclass
class PlacedNode:
    """One node's files under ``root`` and the agent's memory of them."""

    root: Path
    layout: NodeLayout
    containerd: str
    state: AgentState = field(default_factory=AgentState)

    @property
    def paths(self) -> DriveMappedPaths:
        return DriveMappedPaths(self.root)

    @classmethod
    def make(
        cls,
        root: Path,
        text: str,
        containerd: str,
        *,
        config: str = r"C:\Program Files\containerd\config.toml",
        drop_in_dir: str | None = None,
        template: str | None = None,
    ) -> PlacedNode:
        paths = DriveMappedPaths(root)
        local = paths.node_path(config)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
        layout = NodeLayout(
            "custom",
            local,
            drop_in_dir=paths.node_path(drop_in_dir) if drop_in_dir else None,
            template=paths.node_path(template) if template else None,
        )
        return cls(root, layout, containerd)

    def apply(
        self, desired: Mapping[str, Mapping[str, Any]], adopt: Collection[str] = ()
    ) -> Placed:
        """The agent's change for ``desired``, written as the transaction writes it (and
        taken as loaded: the state is the agent's after a restart that came up)."""
        text = self.layout.config.read_text(encoding="utf-8")
        files = NodeFiles(self.layout, self.paths)
        placed = place_on_node(
            files, NodeText(text, False), desired, self.state, self.containerd, adopt=adopt
        )
        edits = placed.edits()
        keep_pristine(edits, placed.held_before)
        write_edits(edits)
        vacated = [e.path for e in edits if e.path not in placed.holds_after]
        drop_leftovers(vacated, [e.path for e in edits if e.after is None], placed.folders)
        state = self.state
        state.owned = dict(placed.result.owned)
        state.adopted = {
            h: t for h, t in {**state.adopted, **placed.result.adopted}.items()
            if h not in placed.result.restored
        }  # fmt: skip
        state.adopted_from = dict(placed.adopted_from)
        state.placement = placed.record
        return placed

    def uninstall(self) -> Placed:
        """The agent's handlers taken out, and its own files beside the node's with them
        (``wcow-agent uninstall`` deletes its backups, originals and state)."""
        placed = self.apply({})
        for leftover in self.root.rglob("*.wcow-backup"):
            leftover.unlink()
        return placed

    def snapshot(self) -> dict[str, bytes | None]:
        """Every file (bytes) and folder (None) under the node's drives."""
        return {
            str(p.relative_to(self.root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(self.root.rglob("*"))
            if not str(p.relative_to(self.root)).startswith("linux")
        }

    def loadable(self, rendered: str | None = None) -> Path:
        """The root as containerd on Linux can load it: its ``imports`` pointed at the
        folders the node's paths map to (``rendered``: the root's text, a template node's
        render). Every other key is the root's, unchanged in meaning."""
        text = rendered if rendered is not None else self.layout.config.read_text("utf-8")
        document = tomllib.loads(text)
        imports = [str(self.paths.local(entry)) for entry in document.get("imports", [])]
        view = self.root / "linux" / self.layout.config.name
        view.parent.mkdir(exist_ok=True)
        view.write_text(tomli_w.dumps({**document, "imports": imports}), encoding="utf-8")
        return view
