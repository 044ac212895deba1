"""The node's configuration files, read for a placement (``placement.place``) and the
change that carries it out (``placing.place_handlers``), and the hash of what is on disk.

Paths written in containerd's configuration are opened through the layout's ``NodePaths``
(``node_paths.py``), never directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wcow_agent.config.file_set import configuration_hash
from wcow_agent.config.files import read_config
from wcow_agent.config.imports import LoadedFile, load_order
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.node_paths import NodePaths, SamePaths
from wcow_agent.config.placed import NodeConfig, Ownership
from wcow_agent.config.placement import Placement, place
from wcow_agent.config.placement_record import PlacementRecord
from wcow_agent.config.state import PRISTINE_SUFFIX, beside
from wcow_agent.config.toml_text import Parse


def read_or_none(path: Path) -> str | None:
    try:
        return read_config(path)
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class NodeFiles:
    """The files of one node's layout."""

    layout: NodeLayout
    paths: NodePaths = field(default_factory=SamePaths)

    @property
    def root_written(self) -> str:
        return self.paths.written(self.layout.config)

    def decide(self, containerd_version: str | None, document: Mapping[str, Any]) -> Placement:
        return place(
            self.layout, containerd_version, (self.root_written, document), self.paths, Path.exists
        )

    def read(
        self,
        placement: Placement,
        root_text: str,
        created: bool,
        ownership: Ownership,
        parse: Parse,
    ) -> NodeConfig:
        """What the placing needs: the root and every file containerd loads with it (the
        agent's own drop-ins left out), the agent's files old and new, the files its
        adopted tables came from, and the originals of the files it changed."""
        root = LoadedFile(self.root_written, self.layout.config, root_text, parse(root_text))
        record = ownership.record
        targets = {placement.target, Path(record.target) if record is not None else None}
        drop_ins = {
            self.paths.written(path)
            for path, way in ((placement.target, placement.way), _recorded(record))
            if path is not None and way == "drop-in"
        }
        order = load_order(root, self.paths, read_config, skip=drop_ins)
        texts: dict[Path, str | None] = {
            path: read_or_none(path) for path in targets if path is not None and path != root.local
        }
        for written in ownership.adopted_from.values():
            local = self.paths.local(written)
            if local is not None and local not in texts and local != root.local:
                texts[local] = read_or_none(local)
        pristine = {
            path: text
            for path in [root.local, *texts]
            if (text := read_or_none(beside(path, PRISTINE_SUFFIX))) is not None
        }
        target = placement.target if placement.way == "drop-in" else None
        missing = target is not None and not target.parent.exists()
        return NodeConfig(root, created, order, texts, pristine, missing)

    def disk_hash(self, root_text: str | None, record: PlacementRecord | None) -> str | None:
        """The hash of the configuration on disk that the agent keeps: the root, and its own
        drop-in or template (None: there is no root file)."""
        if root_text is None:
            return None
        if record is None or record.way == "merge":
            return configuration_hash(root_text)
        return configuration_hash(root_text, {record.target: read_or_none(Path(record.target))})


def _recorded(record: PlacementRecord | None) -> tuple[Path | None, str | None]:
    if record is None:
        return None, None
    return Path(record.target), record.way
