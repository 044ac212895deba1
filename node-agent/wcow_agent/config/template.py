"""The agent's tables in the template a distribution renders config.toml from (RKE2).

k3s renders config.toml from ``config-v3.toml.tmpl`` (else ``config.toml.tmpl``) at every
rke2 start, with Go's text/template; a template may begin with ``{{ template "base" . }}``,
the built-in one, and add to it (k3s ``pkg/agent/containerd/config.go``, rke2-docs
``docs/advanced.md``). Only new tables may be added: redefining a table the base defines
(``runtimes.runhcs-wcow-process``) makes containerd refuse the file ("table ... already
exists"). So the agent:

- creates a missing template as ``{{ template "base" . }}`` plus its own tables, and deletes
  it again when it holds nothing else;
- in an existing template keeps every line the user wrote and appends its tables at the
  end, each header carrying the marker, and cuts exactly those again.

The template is not TOML (it holds template actions), so this works on lines: table
headers are found with ``toml_text.scan_headers``, and the agent's own text holds no
action, so what it appends renders as it is written.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from typing import Any, Final

from wcow_agent.config import toml_text
from wcow_agent.config.effective import defined_handlers
from wcow_agent.config.merge_decision import MARKER, RUNTIMES_PATHS

BASE: Final = '{{ template "base" . }}'
"""The first line of a template the agent creates: k3s's own template, rendered first."""


def agent_handlers(text: str, owned: Collection[str] = ()) -> set[str]:
    """Handlers whose runtime table in the template is the agent's (marked, or owned)."""
    lines = text.splitlines(keepends=True)
    found = set()
    for header in toml_text.scan_headers(lines).headers:
        handler = _handler(header.path)
        if handler is not None and (MARKER in header.comment or handler in owned):
            found.add(handler)
    return found


def _handler(path: tuple[str, ...]) -> str | None:
    for runtimes in RUNTIMES_PATHS.values():
        if len(path) > len(runtimes) and path[: len(runtimes)] == runtimes:
            return path[len(runtimes)]
    return None


def _blocks(lines: list[str], ours: Collection[str]) -> list[tuple[int, int]]:
    """The line ranges of the agent's tables (and their sub-tables)."""
    headers = toml_text.scan_headers(lines).headers
    return [
        (header.line, toml_text.block_end(lines, headers, position))
        for position, header in enumerate(headers)
        if _handler(header.path) in ours and not header.array
    ]


def agent_tables(text: str, owned: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """The agent's tables in the template, as data (its own text holds no action)."""
    lines = text.splitlines(keepends=True)
    ranges = _blocks(lines, agent_handlers(text, owned))
    block = "".join(line for start, end in ranges for line in lines[start:end])
    try:
        return defined_handlers(tomllib.loads(block))
    except tomllib.TOMLDecodeError:
        return {}


def without_agent_tables(text: str, ours: Collection[str]) -> str:
    """``text`` without the agent's tables (``ours``) and the blank line before each."""
    lines = text.splitlines(keepends=True)
    cut: set[int] = set()
    for start, end in _blocks(lines, ours):
        cut.update(range(start, end))
        if start > 0 and not lines[start - 1].strip():
            cut.add(start - 1)
    return "".join(line for index, line in enumerate(lines) if index not in cut)


def template_with(
    text: str | None,
    tables: Mapping[str, Mapping[str, Any]],
    version: int,
    owned: Collection[str] = (),
    created: bool = False,
) -> str | None:
    """The template with exactly ``tables`` as the agent's (appended at the end, marked).
    ``text`` None: there is none yet (one is created). None: the template goes (the agent
    created it and nothing but the base is left)."""
    base = text if text is not None else BASE + "\n"
    kept = without_agent_tables(base, agent_handlers(base, owned))
    if not tables:
        leftover = kept.strip()
        return None if (text is None or created) and leftover == BASE else kept
    newline = toml_text.newline_of(kept) if "\n" in kept else "\n"
    if kept and not kept.endswith("\n"):
        kept += newline
    prefix = toml_text.format_key(RUNTIMES_PATHS[version])
    for handler in sorted(tables):
        kept += newline + "".join(
            toml_text.render_table(prefix, handler, tables[handler], MARKER, newline)
        )
    return kept
