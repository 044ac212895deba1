"""Merge the plan's runtime handlers into a user's containerd config.toml (pure, no I/O).

Rules (see shared/reference/prior-art.md for what broke other installers):
- Only tables this agent owns are added, changed or removed. Ownership is the state the
  caller keeps (handler -> hash of the table written) or, if that was lost, the marker
  comment on the table's header. A table of the same name that is neither is a conflict and
  is left alone, unless the caller names it for adoption (``adopt``): then it is replaced
  once, the replaced table is returned (``MergeResult.adopted``) for the caller to keep, and
  when the agent later lets go of that handler the kept table is written back, unmarked
  (``adopted``), so the file is the user's again.
- Everything else in the file keeps its bytes. The decisions are made on the parsed data
  (``tomllib``); the edit cuts and splices whole tables in the text (``tomltext``) and is
  checked by parsing the result, falling back to a tomlkit round-trip when the file is laid
  out in a way the line editor cannot be sure about.
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
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Table

from wcow_agent import tomltext
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

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
    adopted: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Hand-written tables this merge replaced (``adopt``): handler -> the table's data."""
    restored: list[str] = field(default_factory=list)
    """Adopted handlers whose hand-written table was written back (the agent let go)."""

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


def _put(runtimes: Any, handler: str, data: Mapping[str, Any], marker: bool = True) -> None:
    """Add or replace a handler table, unindented (tomlkit would copy a neighbour's
    indentation onto the header only)."""
    table = _table(data, marker=marker)
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
    for ending in ("\r\n", "\n"):
        if version_line and merged.startswith(version_line + ending):
            merged = merged[len(version_line + ending) :]
            break
    if pristine is not None and _restores(merged, pristine, version):
        return pristine
    return merged


def _restores(merged: str, pristine: str, version: int) -> bool:
    """Whether ``merged`` is ``pristine`` up to blank lines and a ``version`` line that a
    merge added to a file that had none."""
    if _blank_lines_only(merged, pristine):
        return True
    added = f"version = {version}"
    first, _, rest = merged.partition("\n")
    return (
        first.rstrip("\r") == added
        and not pristine.startswith(added)
        and _blank_lines_only(rest, pristine)
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


def _marked(text: str, path: tuple[str, ...]) -> set[str]:
    """Handlers whose table header carries the agent's marker (only those lines are read:
    a rerun with nothing to do stays cheap)."""
    marked = set()
    position = text.find(MARKER)
    while position >= 0:
        start = text.rfind("\n", 0, position) + 1
        end = text.find("\n", position)
        found = tomltext.scan_headers([text[start : end if end >= 0 else len(text)]]).headers
        if found and len(found[0].path) > len(path) and found[0].path[: len(path)] == path:
            marked.add(found[0].path[len(path)])
        position = text.find(MARKER, position + len(MARKER))
    return marked


@dataclass
class _Decision:
    """What to do to the runtimes map, decided on data alone."""

    version: int
    path: tuple[str, ...]
    remove: list[str] = field(default_factory=list)
    put: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # add or replace
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)
    owned: dict[str, str] = field(default_factory=dict)
    adopted: dict[str, dict[str, Any]] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)  # put back unmarked


def _runtimes_data(data: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = data
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
        if not isinstance(node, dict):
            raise ConfigError(f"config.toml: {'.'.join(path)} is not a table ({name!r})")
    table: dict[str, Any] = node
    return table


def _decide(
    data: Mapping[str, Any],
    version: int,
    marked: set[str],
    *,
    desired: Mapping[str, Mapping[str, Any]],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]],
    adopt: Collection[str] = (),
    adopted: Mapping[str, Mapping[str, Any]] | None = None,
) -> _Decision:
    path = RUNTIMES_PATH[version]
    adopted = adopted or {}
    runtimes = _runtimes_data(data, path) or {}
    decision = _Decision(version, path)

    def ours(handler: str) -> bool:
        return handler in owned or handler in marked

    # Remove handlers the agent owns that the plan no longer has (seeded ones last).
    for handler in sorted(runtimes):
        if handler not in desired and ours(handler):
            if handler in builtin_runtimes and owned.get(handler) == "seeded":
                continue
            if handler in adopted:  # the hand-written table the agent replaced goes back
                decision.put[handler] = dict(adopted[handler])
                decision.restored.append(handler)
                continue
            decision.remove.append(handler)
    for handler in sorted(desired):
        table = dict(desired[handler])
        existing = runtimes.get(handler)
        if existing is None:
            decision.put[handler] = table
            decision.added.append(handler)
        elif ours(handler) or existing == table:
            if existing != table or handler not in marked:
                decision.put[handler] = table
                decision.updated.append(handler)
        elif handler in adopt:
            decision.put[handler] = table
            decision.updated.append(handler)
            decision.adopted[handler] = dict(existing)
        else:
            decision.conflicts[handler] = (
                f"config.toml already has a runtime {handler!r} that wcow-agent did not "
                "write; it is left alone (rename the profile's handler, remove that table, "
                "or let the agent take it over with --adopt-handlers)"
            )
            continue
        decision.owned[handler] = table_hash(table)
    if version == 2:
        _keep_default_runtime(data, runtimes, owned, builtin_runtimes, decision)
    return decision


def _keep_default_runtime(
    data: Mapping[str, Any],
    runtimes: Mapping[str, Any],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]],
    decision: _Decision,
) -> None:
    """containerd 1.x: a file with runtimes must define the default runtime itself."""
    seeded = sorted(h for h, mark in owned.items() if mark == "seeded" and h in runtimes)
    if seeded:
        for handler in seeded:
            if decision.owned:
                decision.owned[handler] = "seeded"
            else:  # the last handler is gone: so goes what was seeded for it
                decision.remove.append(handler)
        return
    if not decision.owned:
        return
    if runtimes:
        after = (set(runtimes) - set(decision.remove)) | set(decision.put)
        default = _default_runtime_name(data, 2)
        if default not in after:
            raise ConfigError(
                f"config.toml (version 2) defines runtimes but not its default runtime "
                f"{default!r}; containerd 1.x would not start with it. Add that runtime "
                "or fix default_runtime_name first"
            )
        return
    # The file had no runtimes, so containerd used its built-ins; ours would replace them.
    for handler in sorted(builtin_runtimes):
        if handler not in decision.put:
            decision.put[handler] = builtin_runtimes[handler]
            decision.owned[handler] = "seeded"
            decision.added.append(handler)


def merge_config(
    text: str,
    desired: Mapping[str, Mapping[str, Any]],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]] = BUILTIN_RUNTIMES_1_7,
    pristine: str | None = None,
    *,
    fallback_version: int | None = None,
    adopt: Collection[str] = (),
    adopted: Mapping[str, Mapping[str, Any]] | None = None,
    parse: tomltext.Parse = tomllib.loads,
) -> MergeResult:
    """config.toml text with exactly ``desired`` as the agent's handlers.

    ``owned`` is what the agent wrote before (handler -> table hash); ``builtin_runtimes``
    the containerd 1.x defaults to seed into a version-2 file that gains its first runtime
    (from ``containerd config dump`` on the node, or the known defaults of its version).
    ``pristine`` is the file as it was before the agent first wrote it: when the agent
    owns nothing any more and the file differs from it only in blank lines (the blank
    separators around inserted tables), that original is returned byte for byte.
    ``fallback_version`` is the schema of the node's containerd, for a file that has no
    ``version`` and no plugin tables (it gains a ``version`` line with the first table).
    ``adopt`` names handlers whose same-named table the agent may take over although it did
    not write it; ``adopted`` holds the tables taken over before (handler -> data), written
    back when the agent no longer wants that handler. ``parse`` reads ``text`` (a
    ``tomltext.ParseOnce`` shares the document with the agent's other readers of the file).
    """
    data = _parsed(text, parse)
    version = config_version(data, fallback_version)
    path = RUNTIMES_PATH[version]
    decision = _decide(
        data,
        version,
        _marked(text, path),
        desired=desired,
        owned=owned,
        builtin_runtimes=builtin_runtimes,
        adopt=adopt,
        adopted=adopted,
    )
    version_line = "" if "version" in data else f"version = {version}"
    merged = _edited(text, data, decision, version_line)
    return MergeResult(
        text=_finish(merged, version_line, pristine, version, bool(decision.owned)),
        version=version,
        added=decision.added,
        updated=decision.updated,
        removed=decision.remove,
        conflicts=decision.conflicts,
        owned=decision.owned,
        adopted=decision.adopted,
        restored=decision.restored,
    )


def _parsed(text: str, parse: tomltext.Parse) -> Mapping[str, Any]:
    try:
        return parse(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError("config.toml is refused: values nested too deeply") from None


def _edited(text: str, data: Mapping[str, Any], decision: _Decision, version_line: str) -> str:
    """``text`` with the decision carried out: by line surgery when its result means what
    it should, else through tomlkit, else refused."""
    if not (decision.remove or decision.put):
        return text
    edit = _LineEdit(text, tomltext.scan_headers(text.splitlines(keepends=True)), decision)
    spliced = edit.splice(version_line)
    if spliced is not None and edit.verified(spliced, data, version_line):
        return spliced
    merged = _edit_tomlkit(text, decision, version_line)
    if not _means(merged, data, decision, version_line):
        raise ConfigError(
            "config.toml defines runtimes in a layout wcow-agent cannot edit safely "
            "(dotted keys or inline tables under the runtimes map); write those "
            "runtimes as [table] sections, then retry"
        )
    return merged


class _LineEdit:
    """The edit as line surgery: whole tables cut at header boundaries, ours rendered from
    data and spliced in.

    When the scanner vouches for the file (no multi-line strings, no inline tables, every
    header it found is a table of the parsed file, no ``[`` line it did not understand),
    that is correct by construction and only our rendered tables are parsed back;
    otherwise the whole result is parsed and compared with what was meant."""

    def __init__(self, text: str, scan: tomltext.Scan, decision: _Decision) -> None:
        self.lines = text.splitlines(keepends=True)
        self.scan = scan
        self.decision = decision
        self.newline = tomltext.newline_of(text)
        path, depth = decision.path, len(decision.path)
        self.blocks: dict[str, list[tuple[int, int]]] = {}
        spelling: str | None = None
        for position, header in enumerate(scan.headers):
            if len(header.path) > depth and header.path[:depth] == path and not header.array:
                end = tomltext.block_end(self.lines, scan.headers, position)
                self.blocks.setdefault(header.path[depth], []).append((header.line, end))
                spelling = spelling or _spelling(self.lines[header.line], depth)
        self.prefix = spelling or tomltext.format_key(path)

    def render(self, handler: str) -> list[str]:
        table = self.decision.put[handler]
        marker = "" if handler in self.decision.restored else MARKER
        return tomltext.render_table(self.prefix, handler, table, marker, self.newline)

    def splice(self, version_line: str) -> str | None:
        """The new text; None when a table to change is not laid out as headers (dotted
        keys, inline tables): not ours to cut."""
        lines, decision = self.lines, self.decision
        touched = set(decision.remove) | set(decision.updated) | set(decision.restored)
        if any(h not in self.blocks for h in touched):
            return None
        deleted: set[int] = set()
        replace_at: dict[int, list[str]] = {}
        for handler in sorted(touched):
            ranges = _coalesce(lines, self.blocks[handler])
            for start, end in ranges:
                deleted.update(range(start, end))
            if handler in decision.put:
                replace_at[ranges[0][0]] = self.render(handler)
                continue
            for start, _ in ranges:  # and the blank line the agent put before it
                if start > 0 and not lines[start - 1].strip() and start - 1 not in deleted:
                    deleted.add(start - 1)
        additions = [line for h in decision.added for line in [self.newline, *self.render(h)]]
        insert_at = _insertion_point(
            lines, self.scan.headers, decision.path, self.blocks, set(decision.remove)
        )
        out = [version_line + self.newline] if version_line and decision.owned else []
        for index, line in enumerate(lines):
            if index == insert_at:
                out += additions
                additions = []
            out += replace_at.get(index, [])
            if index not in deleted:
                out.append(line)
        if additions:
            if out and not out[-1].endswith("\n"):
                out[-1] += self.newline
            out += additions
        return "".join(out)

    def verified(self, merged: str, data: Mapping[str, Any], version_line: str) -> bool:
        decision, path = self.decision, self.decision.path
        if not self.scan.unsure and all(
            _is_table(data, h.path, h.array) for h in self.scan.headers
        ):
            rendered = "".join(line for handler in decision.put for line in self.render(handler))
            parsed = _runtimes_data(tomllib.loads(rendered), path) or {}
            return parsed == {h: dict(t) for h, t in decision.put.items()}
        return _means(merged, data, decision, version_line)


def _means(merged: str, data: Mapping[str, Any], decision: _Decision, version_line: str) -> bool:
    """Whether ``merged`` parses to the original data with exactly the decided changes."""
    try:
        result = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        return False
    return _normalized(result, decision.path) == _expected(data, decision, version_line)


def _is_table(data: Mapping[str, Any], path: tuple[str, ...], array: bool) -> bool:
    node: Any = data
    for name in path:
        if isinstance(node, list) and node:
            node = node[-1]
        if not isinstance(node, dict) or name not in node:
            return False
        node = node[name]
    return isinstance(node, list) if array else isinstance(node, dict)


def _coalesce(lines: list[str], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A table and its sub-tables as one range when only blank lines separate them."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and all(not lines[i].strip() for i in range(merged[-1][1], start)):
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _spelling(header_line: str, depth: int) -> str | None:
    """How the file spells the runtimes path in its headers (quotes, no spaces), so our
    tables look like their neighbours."""
    match = tomltext._HEADER.match(header_line.rstrip("\r\n"))
    if match is None:
        return None
    key = match.group(2).strip()
    parts = tomltext.parse_key(key)
    if parts is None:
        return None
    # Re-split the spelled key at the same dots the parser used.
    spelled: list[str] = []
    rest = key
    for part in parts[:depth]:
        rest = rest.lstrip(" \t")
        token = re.match(r'"[^"]*"|\'[^\']*\'|[A-Za-z0-9_-]+', rest)
        if token is None or tomltext.parse_key(token.group(0)) != (part,):
            return None
        spelled.append(token.group(0))
        rest = rest[token.end() :].lstrip(" \t").removeprefix(".")
    return ".".join(spelled)


def _insertion_point(
    lines: list[str],
    headers: list[tomltext.Header],
    path: tuple[str, ...],
    blocks: Mapping[str, list[tuple[int, int]]],
    removed: set[str],
) -> int:
    """After the last table under the runtimes map (then under its closest ancestor),
    before any comments that introduce the next table; the end of the file otherwise."""
    depth = len(path)
    kept = [end for h, ranges in blocks.items() if h not in removed for _, end in ranges]
    if kept:
        return max(kept)
    for size in range(depth, 0, -1):
        ends = [
            tomltext.block_end(lines, headers, position)
            for position, header in enumerate(headers)
            if header.path[:size] == path[:size]
            and not (len(header.path) > depth and header.path[depth] in removed)
        ]
        if ends:
            return max(ends)
    return len(lines)


def _normalized(data: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """``data`` without empty tables along the runtimes path (an implicit table vanishes
    from the text with the last table under it). Copies only along the path."""
    result = dict(data)
    node = result
    chain: list[tuple[dict[str, Any], str]] = []
    for name in path:
        child = node.get(name)
        if not isinstance(child, dict):
            break
        node[name] = dict(child)
        chain.append((node, name))
        node = node[name]
    for parent, name in reversed(chain):
        if parent[name] == {}:
            del parent[name]
        else:
            break
    return result


def _expected(data: Mapping[str, Any], decision: _Decision, version_line: str) -> dict[str, Any]:
    result = dict(data)
    if version_line and decision.owned:
        result["version"] = decision.version
    node = result
    for name in decision.path:
        child = node.get(name)
        node[name] = dict(child) if isinstance(child, dict) else {}
        node = node[name]
    for handler in decision.remove:
        node.pop(handler, None)
    for handler, table in decision.put.items():
        node[handler] = dict(table)
    return _normalized(result, decision.path)


def _edit_tomlkit(text: str, decision: _Decision, version_line: str) -> str:
    """The same edit through a tomlkit round-trip (slow, but takes any layout)."""
    try:
        document = tomlkit.parse((version_line + "\n" if version_line else "") + text)
    except TOMLKitError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None
    runtimes = _runtimes(document, decision.path, create=False)
    for handler in decision.remove:
        del runtimes[handler]
    for handler, table in decision.put.items():
        runtimes = _runtimes(document, decision.path, create=True)
        _put(runtimes, handler, table, marker=handler not in decision.restored)
    _prune_empty(document, decision.path)
    return tomlkit.dumps(document)
