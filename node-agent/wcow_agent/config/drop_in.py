"""The agent's own drop-in (``wcow-runtime.toml``): rendered from data, owned as a file.

The whole file is the agent's: a header that says so, the ``version`` of its schema and
one marked table per handler. It is written only with handlers in it, and deleted (with the
import the agent added to the root) when none is left. A file of that name without the
header is someone else's, and the agent does not write over it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any, Final

from wcow_agent.config import toml_text
from wcow_agent.config.merge_decision import MARKER, RUNTIMES_PATHS, ConfigError, runtimes_data

HEADER: Final = (
    "# managed by wcow-agent: the runtime handlers of WindowsRuntimeProfiles. Edit the "
    "profiles, not this file; it is deleted when the last handler goes."
)


def render_drop_in(tables: Mapping[str, Mapping[str, Any]], version: int) -> str | None:
    """The drop-in holding exactly ``tables`` (None: no handler, no file), checked by
    parsing it back."""
    if not tables:
        return None
    path = RUNTIMES_PATHS[version]
    prefix = toml_text.format_key(path)
    lines = [HEADER + "\n", f"version = {version}\n"]
    for handler in sorted(tables):
        lines += ["\n", *toml_text.render_table(prefix, handler, tables[handler], MARKER, "\n")]
    text = "".join(lines)
    if runtimes_data(tomllib.loads(text), path) != {h: dict(t) for h, t in tables.items()}:
        raise ConfigError(f"the drop-in (version {version}) does not parse back to its tables")
    return text


def is_agents(text: str) -> bool:
    """Whether a file is the agent's drop-in (its header), not someone else's of that name."""
    return text.startswith(HEADER.split(":", 1)[0])


def drop_in_tables(text: str | None) -> dict[str, dict[str, Any]]:
    """The handler tables of the agent's drop-in (empty: none, or not parseable)."""
    if text is None:
        return {}
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
    version = document.get("version")
    path = RUNTIMES_PATHS.get(version) if isinstance(version, int) else None
    runtimes = runtimes_data(document, path) if path else None
    return {h: dict(t) for h, t in (runtimes or {}).items() if isinstance(t, dict)}
