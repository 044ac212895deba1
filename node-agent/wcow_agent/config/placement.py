"""Where the agent puts its runtime handlers on one node: the decision, pure.

Three ways, chosen from the node's layout (``NodeLayout``), its containerd version and the
root file's own text (its ``version`` and ``imports``, parsed: ``containerd config dump``
prints the default conf.d import whether or not it was loaded, containerd 2.x
``cmd/containerd/server/config/config.go`` ``LoadConfig`` and ``command/config.go``):

- **drop-in**: the agent's own file (``wcow-runtime.toml``) in a folder the root imports,
  or in the layout's drop-in folder, whose import the root then gains. containerd 2.x only:
  1.7 merges imports plugin by plugin, so a drop-in that defines one handler replaces every
  CRI setting of the root (1.7 ``services/server/config/config.go`` ``mergeConfig``). Written
  in the root's schema: 2.0-2.2 merge files of different versions wrongly and silently (a
  version-3 drop-in under a version-2 root leaves the root's CRI section unmigrated: 2.x
  ``LoadConfig`` migrates the merged result once, fixed in 2.3 by migrating each file,
  containerd commit 0d7fee062); 2.3.0-2.3.4 and 2.4.0-beta.0 refuse a drop-in whose version
  is higher than the root's (commit 21248d007, reverted in a8ed54668 / 1125b053f); and never
  ``version = 4``, which 2.2 and older refuse (``ValidateVersion``). So a version-2 root gets
  a version-2 drop-in everywhere, a version-3 or 4 root a version-3 one.
- **template**: the layout names the template the distribution renders config.toml from at
  every start (RKE2: ``config-v3.toml.tmpl``, else ``config.toml.tmpl``, k3s
  ``pkg/agent/containerd/config.go``); the agent's tables go into it and config.toml itself is
  never edited. Where the rendered config.toml imports a folder (k3s commit b51167a9:
  ``config-v3.toml.d\\*.toml``), a drop-in there is preferred: it survives rke2's renders
  without touching the template.
- **merge**: the agent's tables merged into the root file (containerd 1.x; a root that
  imports no folder where the layout names none; schema-1 files, in their own names).

A node it cannot place is refused with the reason: a schema-1 root on containerd 2.0-2.2,
which loads it but drops every CRI setting (``LoadConfig`` ``v1Migrate`` bumps the version to
3 before the CRI plugin's own migration, fixed in 2.3.0 by 0d7fee062), and a version-4 root
on 2.0-2.2, which will not start with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from wcow_agent.config.containerd_lines import config_version_for
from wcow_agent.config.imports import absolute_import, declared_imports, name_matches
from wcow_agent.config.layout import DROP_IN_NAME, NodeLayout
from wcow_agent.config.node_paths import NodePaths, flavour

Way = Literal["drop-in", "template", "merge"]
WAYS: Final[tuple[Way, ...]] = ("drop-in", "template", "merge")
LEGACY_TEMPLATE: Final = "config.toml.tmpl"
"""k3s's version-2 template, read when ``config-v3.toml.tmpl`` does not exist."""
_PATTERN = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(.*)$")


@dataclass(frozen=True)
class Placement:
    way: Way | None
    """None: the agent does not write to this node (``reason`` says why)."""
    reason: str
    """CamelCase: why this way (``DropInImported`` ...) or why none (``SchemaV1Lost`` ...)."""
    message: str
    version: int = 0
    """The schema the agent's tables are written in (1 to 4; a drop-in never 4)."""
    target: Path | None = None
    """The file that holds the agent's tables: the root (merge), the drop-in, the template."""
    import_entry: str | None = None
    """The import the root gains for the drop-in folder (None: it imports it already)."""
    whole_plugins: bool = False
    """containerd 1.x: an imported file's plugin table replaces the root's whole table."""


@dataclass(frozen=True)
class ContainerdVersion:
    major: int
    minor: int
    patch: int
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> ContainerdVersion:
        match = _PATTERN.match(text.strip().removeprefix("v"))
        if match is None:
            raise ValueError(f"not a containerd version: {text!r}")
        major, minor, patch, rest = match.groups()
        return cls(int(major), int(minor), int(patch or 0), rest.lstrip("-~+"))

    @property
    def line(self) -> tuple[int, int]:
        return self.major, self.minor

    def checks_drop_in_version(self) -> bool:
        """containerd 2.3.0-2.3.4 and 2.4.0-beta.0: "drop-in config version N higher than
        root config version M" (added 21248d007, reverted in 2.3.5 and 2.4.0). A version
        read without its pre-release (``2.4.0``) counts as having it: the agent's drop-in
        never trips it anyway."""
        if self.line == (2, 3):
            return self.patch <= 4
        return self.line == (2, 4) and self.patch == 0


def root_schema(document: Mapping[str, Any]) -> int | None:
    """The root's own schema: its ``version``; 1 for a file without one that has plugin
    tables; None for a file that sets neither (containerd takes the drop-in's)."""
    version = document.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    return 1 if "plugins" in document else None


def drop_in_version(root: int | None, containerd: ContainerdVersion) -> int:
    """The schema of the agent's drop-in: the root's, never 4 (a version-4 root takes a
    version-3 drop-in on 2.3+, where each file is migrated on its own). A root without a
    version takes the line's own schema, capped at 3 (its version stays 0 until a file
    sets one, so 2.3.0-2.3.4's check never compares against it)."""
    if root in (2, 3):
        return root
    if root == 4:
        return 3
    version = min(config_version_for(f"{containerd.major}.{containerd.minor}.0"), 3)
    if containerd.checks_drop_in_version() and root is not None and version > root:
        return root
    return version


def imported_folders(root_written: str, document: Mapping[str, Any]) -> list[str]:
    """Folders the root imports with a pattern that matches the agent's drop-in name
    (``<folder>\\*.toml``), absolute, in the root's order."""
    folders = []
    for entry in declared_imports(document):
        path = absolute_import(root_written, entry)
        rules = flavour(path)
        folder, name = rules.split(path)
        if "*" in name and "*" not in folder and name_matches(name, DROP_IN_NAME):
            folders.append(folder)
    return folders


def place(
    layout: NodeLayout,
    containerd: str | None,
    root: tuple[str, Mapping[str, Any]],
    paths: NodePaths,
    exists: Callable[[Path], bool],
) -> Placement:
    """Where this node's handlers go. ``root``: the root file's path as containerd names
    it and its parsed text (on a template node: the rendered config.toml); ``exists``: which
    files are on disk (the template)."""
    written, document = root
    schema = root_schema(document)
    if containerd is None:
        why = "containerd's version is not known"
        return _merge(layout, schema, "ContainerdVersionUnknown", why)
    version = ContainerdVersion.parse(containerd)
    folder = _reachable(imported_folders(written, document), paths)
    if layout.template is not None:
        if folder is not None and version.major >= 2:
            return _drop_in(folder, None, schema, version, "RenderedConfigImports")
        return _template(layout.template, schema, exists)
    if version.major < 2:
        merge = _merge(
            layout,
            schema,
            "Containerd1Merge",
            f"containerd {containerd} merges an imported CRI table over the root's whole CRI "
            "section: its handlers are merged into the root file",
        )
        return replace(merge, whole_plugins=True)
    return _refused_root(schema, version) or _place_2x(layout, schema, version, folder, paths)


def _place_2x(
    layout: NodeLayout,
    schema: int | None,
    version: ContainerdVersion,
    folder: Path | None,
    paths: NodePaths,
) -> Placement:
    if schema == 1:
        return _merge(layout, 1, "SchemaV1Merge", "a schema-1 file: merged in its own names")
    if folder is not None:
        return _drop_in(folder, None, schema, version, "DropInImported")
    if layout.drop_in_dir is not None:
        entry = paths.written(layout.drop_in_dir / "*.toml")
        return _drop_in(layout.drop_in_dir, entry, schema, version, "DropInImportAdded")
    return _merge(layout, schema, "NoDropInFolder", "the root imports no folder and none is set")


def _reachable(folders: Sequence[str], paths: NodePaths) -> Path | None:
    for folder in folders:
        local = paths.local(folder)
        if local is not None:
            return local
    return None


def _refused_root(schema: int | None, version: ContainerdVersion) -> Placement | None:
    if version.line >= (2, 3):
        return None
    if schema == 1:
        return Placement(
            None,
            "SchemaV1Lost",
            f"config.toml has schema 1 (no `version`, [plugins.cri]), which containerd "
            f"{version.major}.{version.minor} loads without a word but without any of its "
            "CRI settings (handlers, pause image, CNI folders, snapshotter: fixed in 2.3.0): "
            "the agent does not write to it. Migrate it (`containerd config migrate`) or "
            "write it anew from `containerd config default`",
        )
    if schema is not None and schema > 3:
        return Placement(
            None,
            "ConfigVersionTooNew",
            f"config.toml has version {schema}, which containerd {version.major}."
            f"{version.minor} refuses (it reads up to 3)",
        )
    return None


def _drop_in(
    folder: Path, entry: str | None, schema: int | None, version: ContainerdVersion, reason: str
) -> Placement:
    where = "the folder the root imports" if entry is None else "the root is made to import it"
    drop_in = drop_in_version(schema, version)
    return Placement(
        "drop-in",
        reason,
        f"its own drop-in {folder / DROP_IN_NAME} ({where}), version {drop_in}",
        drop_in,
        folder / DROP_IN_NAME,
        entry,
    )


def _template(template: Path, schema: int | None, exists: Callable[[Path], bool]) -> Placement:
    """The template k3s renders from: ``config-v3.toml.tmpl`` first, else the legacy
    ``config.toml.tmpl`` beside it; neither: the layout's, created."""
    legacy = template.with_name(LEGACY_TEMPLATE)
    found = next((t for t in (template, legacy) if exists(t)), None)
    target = found or template
    version = schema if schema in (2, 3) else (2 if target.name == LEGACY_TEMPLATE else 3)
    how = "the template config.toml is rendered from" if found else "a template created for it"
    return Placement(
        "template",
        "RenderedFromTemplate",
        f"{how} ({target}), version {version}: config.toml is rendered anew at every start",
        version,
        target,
    )


def _merge(layout: NodeLayout, schema: int | None, reason: str, why: str) -> Placement:
    message = f"merged into {layout.config}: {why}"
    return Placement("merge", reason, message, schema or 0, layout.config)
