"""The handlers containerd really runs with: every file it loads, not config.toml alone.

A runtime table of the agent's name in any file the root imports (a drop-in placed by hand)
decides what containerd runs, so the agent judges conflicts and adoption on all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wcow_agent.config.imports import LoadedFile
from wcow_agent.config.merge_decision import RUNTIMES_PATHS

CRI_PLUGINS_1 = ("cri", "io.containerd.grpc.v1.cri")
"""The CRI plugin's tables containerd 1.x reads (schema 1 and 2)."""


def defined_handlers(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every runtime table a file defines, under any schema's path (a drop-in may be
    written in another schema than the root)."""
    found: dict[str, dict[str, Any]] = {}
    for path in RUNTIMES_PATHS.values():
        node: Any = document
        for name in path:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            found.update({h: t for h, t in node.items() if isinstance(t, dict)})
    return found


def handlers_by_file(files: Sequence[LoadedFile]) -> dict[str, list[LoadedFile]]:
    """handler -> the files that define a table for it, in load order (the last wins)."""
    found: dict[str, list[LoadedFile]] = {}
    for file in files:
        for handler in defined_handlers(file.document):
            found.setdefault(handler, []).append(file)
    return found


def replaces_cri_1x(document: Mapping[str, Any]) -> bool:
    """Whether an imported file sets anything of the CRI plugin: containerd 1.x then drops
    every CRI setting of the files before it (1.7 ``mergeConfig`` replaces whole plugin
    tables), the agent's merged handlers included."""
    plugins = document.get("plugins")
    return isinstance(plugins, dict) and any(name in plugins for name in CRI_PLUGINS_1)
