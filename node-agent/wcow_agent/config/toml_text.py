"""Line-level editing of a TOML file at table boundaries, for speed.

A full tomlkit round-trip of a 2,000-line config.toml takes ~200 ms; the agent only ever
adds, replaces or removes whole ``[...runtimes.<handler>]`` tables. So the merge finds the
table headers with a small scanner, cuts and splices lines, renders its own tables with
tomli-w, and then parses the result with ``tomllib`` to check that it means exactly what
was intended. Anything the scanner cannot be sure about (a header inside a multi-line
string or array, runtimes defined with dotted keys or inline tables) fails that check, and
the merge falls back to tomlkit.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tomli_w

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"([^"\\]*)"')
_LITERAL = re.compile(r"'([^']*)'")
_HEADER = re.compile(r"^[ \t]*(\[\[?)(.*?)(\]\]?)[ \t]*(#.*)?$")


Parse = Callable[[str], Mapping[str, Any]]
"""``tomllib.loads``, or a ``ParseOnce``: what the merge and the pause image read with."""


class ParseOnce:
    """``tomllib.loads`` that keeps the last text's document: one cycle reads the same
    config.toml in the merge and for the pause image, and the next cycle reads it again
    when nothing changed it. Keyed by the whole text, so any change is parsed anew. The
    document is shared: callers read it and never change it (``Mapping``)."""

    def __init__(self) -> None:
        self._last: tuple[str, Mapping[str, Any]] | None = None

    def __call__(self, text: str) -> Mapping[str, Any]:
        last = self._last
        if last is not None and last[0] == text:
            return last[1]
        document = tomllib.loads(text)  # a TOMLDecodeError keeps the last one
        self._last = (text, document)
        return document


@dataclass(frozen=True)
class Header:
    line: int
    path: tuple[str, ...]
    comment: str
    array: bool  # [[array of tables]]


def parse_key(text: str) -> tuple[str, ...] | None:
    """A dotted TOML key (``plugins."io.containerd.grpc.v1.cri".containerd``) as parts."""
    parts: list[str] = []
    position, text = 0, text.strip()
    while True:
        while position < len(text) and text[position] in " \t":
            position += 1
        for pattern in (_BARE, _BASIC, _LITERAL):
            match = pattern.match(text, position)
            if match:
                parts.append(match.group(1) if match.groups() else match.group(0))
                position = match.end()
                break
        else:
            return _parse_key_slowly(text)
        while position < len(text) and text[position] in " \t":
            position += 1
        if position == len(text):
            return tuple(parts)
        if text[position] != ".":
            return None
        position += 1


def _parse_key_slowly(text: str) -> tuple[str, ...] | None:
    """Keys with escapes: let tomllib decide."""
    try:
        node: Any = tomllib.loads(f"[{text}]\n")
    except tomllib.TOMLDecodeError:
        return None
    parts: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        name = next(iter(node))
        parts.append(name)
        node = node[name]
    return tuple(parts)


@dataclass(frozen=True)
class Scan:
    headers: list[Header]
    unsure: bool
    """Something the scanner cannot vouch for: a multi-line string, an inline table, a
    line that opens with ``[`` but is not a header it understood."""


def scan_headers(lines: Sequence[str]) -> Scan:
    """Table headers, skipping lines inside multi-line strings."""
    headers = []
    unsure = False
    in_string: str | None = None
    for index, line in enumerate(lines):
        if in_string is not None:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        stripped = line.lstrip()
        if stripped.startswith("["):
            match = _HEADER.match(line.rstrip("\r\n"))
            path = parse_key(match.group(2)) if match else None
            if match and path is not None and (match.group(1) == "[") == (match.group(3) == "]"):
                headers.append(Header(index, path, match.group(4) or "", match.group(1) == "[["))
                continue
            unsure = True
        if '"""' in line or "'''" in line:
            unsure = True
            for quote in ('"""', "'''"):
                if line.count(quote) % 2 == 1:
                    in_string = quote
                    break
        elif "{" in line:
            unsure = True
    return Scan(headers, unsure)


def is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def block_end(lines: Sequence[str], headers: Sequence[Header], position: int) -> int:
    """One past the last key line of the table whose header is ``headers[position]``:
    comments and blank lines before the next header belong to what follows."""
    start = headers[position].line
    stop = headers[position + 1].line if position + 1 < len(headers) else len(lines)
    end = start + 1
    for index in range(start + 1, stop):
        if is_content(lines[index]):
            end = index + 1
    return end


def format_key(parts: Sequence[str]) -> str:
    return ".".join(
        p if _BARE.fullmatch(p) else tomli_w.dumps({p: 0}).split(" = ")[0] for p in parts
    )


def format_value(value: Any) -> str:
    """A TOML value through tomli-w's escaping; flat arrays on one line."""
    if isinstance(value, list) and not any(isinstance(v, (list, Mapping)) for v in value):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).split(" = ", 1)[1].rstrip("\n")


def render_table(
    prefix: str, name: str, data: Mapping[str, Any], comment: str, newline: str
) -> list[str]:
    """``[prefix.name] # comment``: values sorted, then sub-tables, a blank line between."""
    lines: list[str] = []

    def emit(key: str, table: Mapping[str, Any], note: str) -> None:
        lines.append(f"[{key}]" + (f" # {note}" if note else "") + newline)
        for item, value in sorted(table.items()):
            if not isinstance(value, Mapping):
                lines.append(f"{format_key([item])} = {format_value(value)}{newline}")
        for item, value in sorted(table.items()):
            if isinstance(value, Mapping):
                lines.append(newline)
                emit(f"{key}.{format_key([item])}", value, "")

    emit(f"{prefix}.{format_key([name])}", data, comment)
    return lines


def newline_of(text: str) -> str:
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"
