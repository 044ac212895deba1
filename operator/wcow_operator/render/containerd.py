"""containerd runtime handlers for the runhcs shim as TOML fragments.

The table of one handler is plain data (``wcow_contract.wire.runtime_table``); it is the same for
every config schema version, only the path of the ``runtimes`` map differs. TOML is
produced by a serializer (tomli-w) from that data and parsed back with tomllib before it is
returned, so no profile value can change the document's structure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

import tomli_w

from wcow_contract.wire.runtime_table import CONFIG_VERSIONS, RUNTIMES_PATH


class RenderError(RuntimeError):
    """Rendered output did not parse back to its data: a bug, never a user error."""


def _sorted(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _sorted(v) if isinstance(v, Mapping) else v for k, v in sorted(data.items())}


def runtimes_document(tables: Mapping[str, Mapping[str, Any]], version: int) -> dict[str, Any]:
    """The data of a config fragment holding these handler tables."""
    document: dict[str, Any] = {"version": version}
    node = document
    for name in RUNTIMES_PATH[version]:
        node = node.setdefault(name, {})
    for handler in sorted(tables):
        node[handler] = dict(tables[handler])
    return document


HEADER = (
    "Rendered by wcow-runtime from WindowsRuntimeProfiles. Do not edit: change the profiles.",
    "A fragment of containerd's config.toml holding only the runtime handlers. The node agent",
    "merges it into config.toml; on containerd 1.x do not use it as an `imports` drop-in (a",
    "plugin table there replaces the CRI plugin's other settings).",
)


def render_containerd_toml(tables: Mapping[str, Mapping[str, Any]], version: int) -> str:
    """TOML text of a config fragment with these handler tables, checked by parsing it back."""
    if version not in RUNTIMES_PATH:
        raise ValueError(
            f"containerd config version {version} is not supported: use one of "
            f"{', '.join(map(str, CONFIG_VERSIONS))}"
        )
    expected = runtimes_document(tables, version)
    # tomli-w writes values only through its escaping serializer; it is ~30x faster than
    # tomlkit for whole documents (tomlkit is for round-tripping a user's file).
    text = "".join(f"# {line}\n" for line in HEADER) + tomli_w.dumps(_sorted(expected))
    if tomllib.loads(text) != expected:
        raise RenderError(f"containerd TOML (version {version}) does not parse back to its data")
    return text
