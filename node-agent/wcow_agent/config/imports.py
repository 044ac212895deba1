"""The files containerd loads for a root config.toml, in the order it merges them.

What containerd does (``LoadConfig`` and ``resolveImports``, the same in 1.7
``services/server/config/config.go`` and 2.x ``cmd/containerd/server/config/config.go``):
only a loaded file's own ``imports`` are followed (the built-in default pattern of 2.2+ is
never resolved unless config.toml lists it); a relative import is joined to the importing
file's folder; an import containing ``*`` goes through ``filepath.Glob`` (matches sorted by
name, a pattern that matches nothing is no error); the order is breadth-first (the root, its
imports in order, then theirs); a file already loaded is skipped; later files win. A missing
file that is not a pattern stops the daemon (2.x ``config dump`` stops reading silently
instead: the agent judges as the daemon does).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_agent.config.node_paths import NodePaths, flavour, is_absolute

_MAGIC = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class LoadedFile:
    """One file containerd reads: how it is named there, where the agent read it, what
    it holds."""

    written: str
    local: Path
    text: str
    document: Mapping[str, Any]


@dataclass(frozen=True)
class LoadOrder:
    files: tuple[LoadedFile, ...]
    """The root first, then its imports as containerd merges them."""
    problem: str | None = None
    """Why containerd would not start with this set (a missing or broken import)."""

    @property
    def imported(self) -> tuple[LoadedFile, ...]:
        return self.files[1:]


def declared_imports(document: Mapping[str, Any]) -> list[str]:
    """A file's own ``imports`` (empty when it has none or they are not strings)."""
    entries = document.get("imports")
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries if isinstance(entry, str)]


def absolute_import(parent: str, entry: str) -> str:
    """``filepath.Clean(entry)``, joined to the importing file's folder when relative."""
    if is_absolute(entry):
        return str(flavour(entry).normpath(entry))
    rules = flavour(parent)
    return str(rules.normpath(rules.join(rules.dirname(parent), entry)))


def resolve_imports(parent: str, entries: Sequence[str], paths: NodePaths) -> list[str]:
    """containerd's ``resolveImports``: each entry made absolute; one containing ``*``
    expanded to the files it matches, sorted."""
    out: list[str] = []
    for entry in entries:
        path = absolute_import(parent, entry)
        out += glob(path, paths) if "*" in path else [path]
    return out


def glob(pattern: str, paths: NodePaths) -> list[str]:
    """Go's ``filepath.Glob`` over the node's files (through ``paths``): the folder part
    expanded first when it has magic too; names matched with ``filepath.Match``'s rules
    for one path element, in sorted order."""
    rules = flavour(pattern)
    folder, name = rules.split(pattern)
    if not _MAGIC.search(rules.splitdrive(folder)[1]):
        folders = [folder]
    else:
        folders = glob(rules.normpath(folder), paths)
    matches: list[str] = []
    for each in folders:
        local = paths.local(each)
        if local is None or not local.is_dir():
            continue
        names = sorted(child.name for child in local.iterdir())
        matches += [rules.join(each, n) for n in names if name_matches(name, n)]
    return matches


def name_matches(pattern: str, name: str) -> bool:
    """``filepath.Match`` for one element (``*``, ``?``, ``[...]`` with ``^`` negation)."""
    return fnmatch.fnmatchcase(name, pattern.replace("[^", "[!"))


def load_order(
    root: LoadedFile,
    paths: NodePaths,
    read: Callable[[Path], str],
    *,
    skip: Collection[str] = (),
) -> LoadOrder:
    """Every file containerd loads for ``root``, in its order. ``skip``: files to leave out
    (written paths), as if they were not on disk (the agent's own drop-in, judged apart)."""
    files: list[LoadedFile] = []
    loaded: set[str] = set()
    pending = [root.written]
    while pending:
        path, pending = pending[0], pending[1:]
        if path in loaded:
            continue
        if path == root.written:
            found: LoadedFile | str = root
        elif path in skip:
            loaded.add(path)
            continue
        else:
            found = _load(path, paths, read)
        if isinstance(found, str):
            return LoadOrder(tuple(files), found)
        files.append(found)
        pending += resolve_imports(path, declared_imports(found.document), paths)
        loaded.add(path)
    return LoadOrder(tuple(files))


def _load(written: str, paths: NodePaths, read: Callable[[Path], str]) -> LoadedFile | str:
    """The file, or why containerd would not start with it."""
    local = paths.local(written)
    if local is None:
        return f"import {written} is not a path on this node"
    try:
        text = read(local)
    except FileNotFoundError:
        return f"import {written} does not exist: containerd would not start"
    except (OSError, UnicodeDecodeError) as error:
        return f"import {written} cannot be read: {error}"
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return f"import {written} is not valid TOML: {error}"
    return LoadedFile(written, local, text, document)
