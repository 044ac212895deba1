"""The one edit a drop-in needs of the root config.toml: an entry in its ``imports``.

The agent adds the import of its drop-in folder when the root does not import one already,
and takes exactly that entry out again (``DropInRecord.import_added``). The edit is made in
the text (the entry appended inside a one-line array, or a new ``imports`` line after
``version``) and checked by parsing the result; a layout the line editor is not sure about
goes through tomlkit, and a result that does not mean what was intended is refused.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from wcow_agent.config import toml_text
from wcow_agent.config.imports import declared_imports
from wcow_agent.config.merge_decision import ConfigError

_IMPORTS_LINE = re.compile(r"^imports[ \t]*=[ \t]*\[(?P<body>.*)\](?P<tail>[ \t]*(#.*)?)$")
_VERSION_LINE = re.compile(r"^version[ \t]*=")


def quoted(entry: str) -> str:
    """A TOML string for ``entry``: a literal string (Windows paths stay readable, as
    containerd's own default writes them) unless it holds a quote or a control character."""
    if "'" not in entry and all(ch >= " " and ch != "\x7f" for ch in entry):
        return f"'{entry}'"
    return toml_text.format_value(entry)


def with_import(text: str, entry: str) -> str:
    """``text`` whose ``imports`` also list ``entry`` (at the end: containerd loads the
    agent's folder after what the root imported before)."""
    document = _parsed(text)
    entries = declared_imports(document)
    if entry in entries:
        return text
    edited = _line_edit(text, entry, add=True)
    expected = {**document, "imports": [*entries, entry]}
    return _checked(edited, expected) or _tomlkit_edit(text, entry, expected, add=True)


def without_import(text: str, entry: str, line_added: bool) -> str:
    """``text`` without the ``entry`` the agent added; without the whole ``imports`` key
    when the agent added that line (``line_added``) and nothing else is listed."""
    document = _parsed(text)
    entries = declared_imports(document)
    if entry not in entries:
        return text
    kept = [e for e in entries if e != entry]
    expected = dict(document)
    if kept or not line_added:
        expected["imports"] = kept
    else:
        expected.pop("imports", None)
    edited = _line_edit(text, entry, add=False, drop_line=line_added and not kept)
    return _checked(edited, expected) or _tomlkit_edit(text, entry, expected, add=False)


def _parsed(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None


def _line_edit(text: str, entry: str, *, add: bool, drop_line: bool = False) -> str | None:
    lines = text.splitlines(keepends=True)
    newline = toml_text.newline_of(text)
    for index, line in enumerate(lines):
        match = _IMPORTS_LINE.match(line.rstrip("\r\n"))
        if match is None:
            if line.lstrip().startswith("["):
                break  # past the top-level keys
            continue
        body, ending = match["body"], line[len(line.rstrip("\r\n")) :]
        if add:
            items = body.strip()
            new_body = f"{items}, {quoted(entry)}" if items else quoted(entry)
        elif drop_line:
            return "".join(lines[:index] + lines[index + 1 :])
        else:
            new_body = _without_item(body, entry)
        lines[index] = f"imports = [{new_body}]{match['tail']}{ending}"
        return "".join(lines)
    if not add:
        return None
    at = 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break
        if _VERSION_LINE.match(line):
            at = i + 1
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += newline
    lines.insert(at, f"imports = [{quoted(entry)}]{newline}")
    return "".join(lines)


def _without_item(body: str, entry: str) -> str:
    for spelling in (quoted(entry), toml_text.format_value(entry)):
        for cut in (f", {spelling}", f",{spelling}", f"{spelling}, ", f"{spelling},", spelling):
            if cut in body:
                return body.replace(cut, "", 1).strip()
    return body


def _checked(edited: str | None, expected: Mapping[str, Any]) -> str | None:
    if edited is None:
        return None
    try:
        return edited if tomllib.loads(edited) == expected else None
    except tomllib.TOMLDecodeError:
        return None


def _tomlkit_edit(text: str, entry: str, expected: Mapping[str, Any], *, add: bool) -> str:
    try:
        document = tomlkit.parse(text)
        if "imports" not in expected:
            document.pop("imports", None)
        elif add and "imports" not in document:
            document["imports"] = [entry]
        else:
            array = document["imports"]
            if add:
                array.append(entry)
            else:
                array.remove(entry)
        edited = tomlkit.dumps(document)
    except (TOMLKitError, ValueError, KeyError):
        edited = ""
    if _checked(edited, expected) is None:
        raise ConfigError(
            "cannot edit config.toml's `imports` in its layout: "
            + (f"add {entry!r} to it by hand" if add else f"remove {entry!r} from it by hand")
        )
    return edited
