"""Paths as containerd reads them in its configuration, and where the agent opens them.

containerd on a Windows node reads ``imports = ['C:\\Program Files\\containerd\\conf.d\\*.toml']``
with Go's Windows ``filepath`` rules; the agent runs on that node and opens the same paths.
The tests and the simulator run on Linux, where a ``C:\\`` path means nothing: they give the
agent a ``NodePaths`` that maps the node's drives to local folders (``DriveMappedPaths``).
The agent's configuration writers take a ``NodePaths`` and never open a path written in a
configuration file any other way.

Path rules follow the spelling: a path with a drive letter, a backslash or a UNC prefix is
a Windows path (``ntpath``, as containerd's ``filepath`` on Windows), anything else a POSIX
one (the tests that run containerd's own loader on Linux write POSIX imports).
"""

from __future__ import annotations

import ntpath
import posixpath
import re
import sys
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import ModuleType
from typing import Protocol

_DRIVE = re.compile(r"^[A-Za-z]:")


class NodePaths(Protocol):
    """Where the agent opens a path that containerd reads, and the reverse.

    The real host (Windows) is ``SamePaths``; a host double on Linux maps the node's drives
    (``DriveMappedPaths``). The host layer may provide its own: the configuration writers
    only need these two methods."""

    def local(self, written: str) -> Path | None:
        """The file the agent opens for a path as written in containerd's configuration;
        None when that path is not reachable from here (then containerd, on this host,
        would not find it either)."""
        ...

    def written(self, local: Path) -> str:
        """How a file the agent opens is named in containerd's configuration (the import
        line the agent adds)."""
        ...


def is_windows_path(path: str) -> bool:
    return bool(_DRIVE.match(path)) or "\\" in path


def flavour(path: str) -> ModuleType:
    """``ntpath`` for a Windows spelling, else ``posixpath``: the rules containerd's
    ``filepath`` applies on the host that wrote it."""
    return ntpath if is_windows_path(path) else posixpath


def is_absolute(path: str) -> bool:
    """Go's ``filepath.IsAbs``: on Windows a drive and a root (``C:\\x``) or a UNC path;
    ``\\x`` alone is relative to the current drive, not absolute."""
    if is_windows_path(path):
        pure = PureWindowsPath(path)
        return bool(pure.drive) and bool(pure.root)
    return path.startswith("/")


class SamePaths:
    """The agent runs where containerd runs: a path is opened as written. On a host of the
    other kind (a Windows path on Linux) it is not reachable."""

    def __init__(self, windows: bool | None = None) -> None:
        self.windows = sys.platform == "win32" if windows is None else windows

    def local(self, written: str) -> Path | None:
        if is_windows_path(written) != self.windows:
            return None
        return Path(written)

    def written(self, local: Path) -> str:
        return str(local)


class DriveMappedPaths:
    """A Windows node's drives as local folders (``C:\\a\\b`` -> ``<root>/C/a/b``): the
    simulator's and the tests' node. Local paths outside ``root`` are written as they are
    (POSIX), so a configuration may mix both."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def local(self, written: str) -> Path | None:
        if not is_windows_path(written):
            return Path(written)
        pure = PureWindowsPath(written)
        if not pure.drive or not pure.root or pure.drive.startswith("\\\\"):
            return None  # relative to a current drive, or a UNC share: not on this node
        return self.root.joinpath(pure.drive[0].upper(), *pure.parts[1:])

    def written(self, local: Path) -> str:
        try:
            relative = PurePosixPath(local.absolute().relative_to(self.root.absolute()))
        except ValueError:
            return str(local)
        drive, *rest = relative.parts
        return str(PureWindowsPath(f"{drive}:\\", *rest))

    def node_path(self, windows_path: str) -> Path:
        """The local folder of a Windows path (``C:\\Program Files\\containerd``), for a
        test or the simulator to lay out a node's files."""
        found = self.local(windows_path)
        if found is None:
            raise ValueError(f"{windows_path!r} is not a path on a drive of this node")
        return found


class FolderMappedPaths:
    """One folder of the node (containerd's, ``node``: ``C:\\Program Files\\containerd``)
    as a local folder (``local``), for the offline ``merge`` of a file copied off a node:
    what the file imports under the node's folder is looked for beside the copy."""

    def __init__(self, local: Path, node: str) -> None:
        self.local_folder = local
        self.node_folder = PureWindowsPath(node)

    def local(self, written: str) -> Path | None:
        if not is_windows_path(written):
            return Path(written)
        pure = PureWindowsPath(written)
        try:
            relative = pure.relative_to(self.node_folder)
        except ValueError:
            return None
        return self.local_folder.joinpath(*relative.parts)

    def written(self, local: Path) -> str:
        try:
            relative = local.absolute().relative_to(self.local_folder.absolute())
        except ValueError:
            return str(local)
        return str(self.node_folder.joinpath(*relative.parts))
