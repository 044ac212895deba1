"""A merge's decision carried out in config.toml's text (``edit``): whole tables cut at header
boundaries and ours spliced in (``_LineEdit``), checked by parsing the result, else the
same edit through a tomlkit round-trip (slow, but takes any layout), else refused.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Table

from wcow_agent.config import toml_text
from wcow_agent.config.merge_decision import MARKER, ConfigError, Decision, runtimes_data


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


def edit(text: str, data: Mapping[str, Any], decision: Decision, version_line: str) -> str:
    """``text`` with the decision carried out: by line surgery when its result means what
    it should, else through tomlkit, else refused."""
    if not (decision.remove or decision.put):
        return text
    edit = _LineEdit(text, toml_text.scan_headers(text.splitlines(keepends=True)), decision)
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

    def __init__(self, text: str, scan: toml_text.Scan, decision: Decision) -> None:
        self.lines = text.splitlines(keepends=True)
        self.scan = scan
        self.decision = decision
        self.newline = toml_text.newline_of(text)
        path, depth = decision.path, len(decision.path)
        self.blocks: dict[str, list[tuple[int, int]]] = {}
        spelling: str | None = None
        for position, header in enumerate(scan.headers):
            if len(header.path) > depth and header.path[:depth] == path and not header.array:
                end = toml_text.block_end(self.lines, scan.headers, position)
                self.blocks.setdefault(header.path[depth], []).append((header.line, end))
                spelling = spelling or _spelling(self.lines[header.line], depth)
        self.prefix = spelling or toml_text.format_key(path)

    def render(self, handler: str) -> list[str]:
        table = self.decision.put[handler]
        marker = "" if handler in self.decision.restored else MARKER
        return toml_text.render_table(self.prefix, handler, table, marker, self.newline)

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
            parsed = runtimes_data(tomllib.loads(rendered), path) or {}
            return parsed == {h: dict(t) for h, t in decision.put.items()}
        return _means(merged, data, decision, version_line)


def _means(merged: str, data: Mapping[str, Any], decision: Decision, version_line: str) -> bool:
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
    match = toml_text._HEADER.match(header_line.rstrip("\r\n"))
    if match is None:
        return None
    key = match.group(2).strip()
    parts = toml_text.parse_key(key)
    if parts is None:
        return None
    # Re-split the spelled key at the same dots the parser used.
    spelled: list[str] = []
    rest = key
    for part in parts[:depth]:
        rest = rest.lstrip(" \t")
        token = re.match(r'"[^"]*"|\'[^\']*\'|[A-Za-z0-9_-]+', rest)
        if token is None or toml_text.parse_key(token.group(0)) != (part,):
            return None
        spelled.append(token.group(0))
        rest = rest[token.end() :].lstrip(" \t").removeprefix(".")
    return ".".join(spelled)


def _insertion_point(
    lines: list[str],
    headers: list[toml_text.Header],
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
            toml_text.block_end(lines, headers, position)
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


def _expected(data: Mapping[str, Any], decision: Decision, version_line: str) -> dict[str, Any]:
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


def _edit_tomlkit(text: str, decision: Decision, version_line: str) -> str:
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
