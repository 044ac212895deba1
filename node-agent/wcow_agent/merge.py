"""Merge the plan's runtime handlers into a user's containerd config.toml (pure, no I/O).

Rules (see shared/reference/prior-art.md for what broke other installers):
- Only tables this agent owns are added, changed or removed. Ownership is the state the
  caller keeps (handler -> hash of the table written) or, if that was lost, the marker
  comment on the table's header. A table of the same name that is neither is a conflict and
  is left alone.
- Everything else in the file keeps its bytes: tomlkit round-trips comments and order.
- The table path follows the file's schema version (2: containerd 1.x, 3 and 4: 2.x).
  Version 1 is refused.
- containerd 1.x drops its built-in runtimes when the file has a ``runtimes`` table, so a
  version-2 file that gains its first table is also given the built-in default handlers
  (marked as seeded and owned, removed again with the last handler).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Table

from wcow_operator.render.containerd import RUNTIMES_PATH

MARKER = "managed by wcow-agent: edit the WindowsRuntimeProfile, not this table"
DEFAULT_RUNTIME = "runhcs-wcow-process"

# Built-in Windows runtimes of containerd 1.x (pkg/cri/config/config_windows.go), which a
# version-2 file loses as soon as it defines any runtime itself.
BUILTIN_RUNTIMES_1_6: dict[str, dict[str, Any]] = {
    "runhcs-wcow-process": {"runtime_type": "io.containerd.runhcs.v1"},
}
BUILTIN_RUNTIMES_1_7: dict[str, dict[str, Any]] = {
    "runhcs-wcow-process": {
        "runtime_type": "io.containerd.runhcs.v1",
        "container_annotations": ["io.microsoft.container.*"],
    },
    "runhcs-wcow-hypervisor": {
        "runtime_type": "io.containerd.runhcs.v1",
        "pod_annotations": ["io.microsoft.virtualmachine.*"],
        "container_annotations": ["io.microsoft.container.*"],
        "options": {"SandboxIsolation": 1, "ScaleCpuLimitsToSandbox": True},
    },
}


class ConfigError(ValueError):
    """A config.toml the agent must not edit; the message says why and what to do."""


def table_hash(table: Mapping[str, Any]) -> str:
    encoded = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(encoded.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class MergeResult:
    text: str
    version: int
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)
    owned: dict[str, str] = field(default_factory=dict)  # handler -> table hash written

    def changed(self, before: str) -> bool:
        return self.text != before

    def diff(self, before: str, name: str = "config.toml") -> str:
        return "".join(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                self.text.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )


def config_version(document: Mapping[str, Any], fallback: int | None = None) -> int:
    """The file's schema version; containerd reads a file without ``version`` as 1.

    A file without ``version`` and without any ``plugins`` table holds nothing whose
    layout depends on the version; it gets ``fallback`` (the schema of the node's
    containerd) when given."""
    if "version" not in document and fallback is not None and "plugins" not in document:
        return fallback
    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"config.toml: version must be an integer, not {version!r}")
    if version == 1:
        raise ConfigError(
            "config.toml has schema version 1 (no `version` key or `version = 1`), which "
            "wcow-agent does not edit: run `containerd config migrate` (containerd 2.x) or "
            "regenerate it with `containerd config default`, then retry"
        )
    if version not in RUNTIMES_PATH:
        raise ConfigError(
            f"config.toml has schema version {version}; wcow-agent knows versions "
            f"{', '.join(map(str, RUNTIMES_PATH))}"
        )
    return version


def _plain(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


def _table(data: Mapping[str, Any], marker: bool) -> Table:
    """A table from data: values, a blank line, then sub-tables; keys sorted."""
    table = tomlkit.table()
    for key in sorted(k for k, v in data.items() if not isinstance(v, Mapping)):
        table.add(key, data[key])
    table.add(tomlkit.nl())
    for key in sorted(k for k, v in data.items() if isinstance(v, Mapping)):
        table.add(key, _table(data[key], marker=False))
    if marker:
        table.comment(MARKER)
    return table


def _put(runtimes: Any, handler: str, data: Mapping[str, Any]) -> None:
    """Add or replace a handler table, unindented (tomlkit would copy a neighbour's
    indentation onto the header only)."""
    table = _table(data, marker=True)
    if handler in runtimes:
        runtimes[handler] = table
    else:
        runtimes.add(handler, table)
    _unindent(runtimes[handler])


def _unindent(table: Table) -> None:
    table.trivia.indent = ""
    for key, value in table.value.body:
        if isinstance(value, Table):
            _unindent(value)
        elif key is not None:  # a key = value line (blank lines have no key)
            value.trivia.indent = ""


def _runtimes(document: tomlkit.TOMLDocument, path: tuple[str, ...], create: bool) -> Any:
    node: Any = document
    for name in path:
        child = node.get(name)
        if child is None:
            if not create:
                return None
            child = tomlkit.table(is_super_table=True)
            node.add(name, child)
            child = node[name]
        elif not isinstance(child, Table | dict):
            raise ConfigError(f"config.toml: {'.'.join(path)} is not a table ({name!r})")
        node = child
    return node


def _prune_empty(document: tomlkit.TOMLDocument, path: tuple[str, ...]) -> None:
    """Remove implicit tables along ``path`` that were left empty (created by a merge)."""
    for depth in range(len(path), 0, -1):
        parent = _runtimes(document, path[: depth - 1], create=False)
        child = parent.get(path[depth - 1]) if parent is not None else None
        if isinstance(child, Table) and child.is_super_table() and len(child) == 0:
            del parent[path[depth - 1]]
        else:
            return


def _blank_lines_only(a: str, b: str) -> bool:
    def squeeze(text: str) -> list[str]:
        return [line.rstrip() for line in text.splitlines() if line.strip()]

    return squeeze(a) == squeeze(b)


def _finish(merged: str, version_line: str, pristine: str | None, version: int, owns: bool) -> str:
    """Drop the ``version`` line this merge added when it added nothing else; give back the
    original file when the agent owns nothing any more."""
    if owns:
        return merged
    if version_line and merged.startswith(version_line):
        merged = merged[len(version_line) :]
    if pristine is not None and _restores(merged, pristine, version):
        return pristine
    return merged


def _restores(merged: str, pristine: str, version: int) -> bool:
    """Whether ``merged`` is ``pristine`` up to blank lines and a ``version`` line that a
    merge added to a file that had none."""
    if _blank_lines_only(merged, pristine):
        return True
    added = f"version = {version}\n"
    return (
        merged.startswith(added)
        and not pristine.startswith(added)
        and _blank_lines_only(merged[len(added) :], pristine)
    )


def _is_marked(table: Any) -> bool:
    trivia = getattr(table, "trivia", None)
    return trivia is not None and MARKER in (trivia.comment or "")


def _default_runtime_name(document: Mapping[str, Any], version: int) -> str:
    containerd = _plain(document)
    for name in RUNTIMES_PATH[version][:-1]:
        containerd = containerd.get(name, {}) if isinstance(containerd, dict) else {}
    default = containerd.get("default_runtime_name") if isinstance(containerd, dict) else None
    return default if isinstance(default, str) and default else DEFAULT_RUNTIME


def merge_config(
    text: str,
    desired: Mapping[str, Mapping[str, Any]],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]] = BUILTIN_RUNTIMES_1_7,
    pristine: str | None = None,
    *,
    fallback_version: int | None = None,
) -> MergeResult:
    """config.toml text with exactly ``desired`` as the agent's handlers.

    ``owned`` is what the agent wrote before (handler -> table hash); ``builtin_runtimes``
    the containerd 1.x defaults to seed into a version-2 file that gains its first runtime
    (from ``containerd config dump`` on the node, or the known defaults of its version).
    ``pristine`` is the file as it was before the agent first wrote it: when the agent
    owns nothing any more and the file differs from it only in blank lines (tomlkit adds
    separators around tables it inserts), that original is returned byte for byte.
    ``fallback_version`` is the schema of the node's containerd, for a file that has no
    ``version`` and no plugin tables (it gains a ``version`` line with the first table).
    """
    try:
        document = tomlkit.parse(text)
    except TOMLKitError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None
    version = config_version(document, fallback_version)
    version_line = "" if "version" in document else f"version = {version}\n"
    if version_line:
        document = tomlkit.parse(version_line + text)
    path = RUNTIMES_PATH[version]
    runtimes = _runtimes(document, path, create=False)
    had_runtimes = runtimes is not None and len(runtimes) > 0
    result = MergeResult(text="", version=version)
    now_owned: dict[str, str] = {}

    def ours(handler: str, table: Any) -> bool:
        return handler in owned or _is_marked(table)

    # Remove handlers the agent owns that the plan no longer has (seeded ones last).
    if runtimes is not None:
        for handler in sorted(set(runtimes)):
            if handler not in desired and ours(handler, runtimes[handler]):
                if handler in builtin_runtimes and owned.get(handler) == "seeded":
                    continue
                del runtimes[handler]
                result.removed.append(handler)

    for handler in sorted(desired):
        table = dict(desired[handler])
        existing = runtimes.get(handler) if runtimes is not None else None
        if existing is None:
            runtimes = _runtimes(document, path, create=True)
            _put(runtimes, handler, table)
            result.added.append(handler)
        elif ours(handler, existing) or _plain(existing) == table:
            if _plain(existing) != table or not _is_marked(existing):
                _put(runtimes, handler, table)
                result.updated.append(handler)
        else:
            result.conflicts[handler] = (
                f"config.toml already has a runtime {handler!r} that wcow-agent did not "
                "write; it is left alone (rename the profile's handler, or remove that table)"
            )
            continue
        now_owned[handler] = table_hash(table)

    if version == 2:
        _keep_default_runtime(
            document,
            runtimes,
            owned=owned,
            now_owned=now_owned,
            builtin_runtimes=builtin_runtimes,
            had_runtimes=had_runtimes,
            result=result,
        )
    _prune_empty(document, path)
    merged = _finish(tomlkit.dumps(document), version_line, pristine, version, bool(now_owned))
    return MergeResult(
        text=merged,
        version=version,
        added=result.added,
        updated=result.updated,
        removed=result.removed,
        conflicts=result.conflicts,
        owned=now_owned,
    )


def _keep_default_runtime(
    document: tomlkit.TOMLDocument,
    runtimes: Any,
    *,
    owned: Mapping[str, str],
    now_owned: dict[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]],
    had_runtimes: bool,
    result: MergeResult,
) -> None:
    """containerd 1.x: a file with runtimes must define the default runtime itself."""
    if runtimes is None:
        return
    seeded = sorted(h for h, mark in owned.items() if mark == "seeded" and h in runtimes)
    if seeded:
        for handler in seeded:
            if now_owned:
                now_owned[handler] = "seeded"
            else:  # the last handler is gone: so goes what was seeded for it
                del runtimes[handler]
                result.removed.append(handler)
        return
    if not now_owned:
        return
    if had_runtimes:
        default = _default_runtime_name(document, 2)
        if default not in runtimes:
            raise ConfigError(
                f"config.toml (version 2) defines runtimes but not its default runtime "
                f"{default!r}; containerd 1.x would not start with it. Add that runtime "
                "or fix default_runtime_name first"
            )
        return
    # The file had no runtimes, so containerd used its built-ins; ours would replace them.
    for handler in sorted(builtin_runtimes):
        if handler not in runtimes:
            _put(runtimes, handler, builtin_runtimes[handler])
            now_owned[handler] = "seeded"
            result.added.append(handler)
