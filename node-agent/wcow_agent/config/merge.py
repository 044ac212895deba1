"""Merge the plan's runtime handlers into a user's containerd config.toml (pure, no I/O).

Rules (against what broke other installers: kata-deploy's config.toml holding only its own
stanza, or the handlers it no longer wanted left behind: kata-containers#3229, #13843):
- Only tables this agent owns are added, changed or removed. Ownership is the state the
  caller keeps (handler -> hash of the table written) or, if that was lost, the marker
  comment on the table's header. A table of the same name that is neither is a conflict and
  is left alone, unless the caller names it for adoption (``adopt``): then it is replaced
  once, the replaced table is returned (``MergeResult.adopted``) for the caller to keep, and
  when the agent later lets go of that handler the kept table is written back, unmarked
  (``adopted``), so the file is the user's again.
- Everything else in the file keeps its bytes. The decisions are made on the parsed data
  (``tomllib``, ``merge_decision``); the edit cuts and splices whole tables in the text
  (``merge_splice``, ``toml_text``) and is checked by parsing the result, falling back to a
  tomlkit round-trip when the file is laid out in a way the line editor cannot be sure about.
- The table path follows the file's schema version (1 and 2: containerd 1.x, 3 and 4: 2.x);
  a schema-1 file (no ``version``, ``[plugins.cri]``) keeps its schema: the tables are
  written in its names (``[plugins.cri.containerd.runtimes.<handler>]``). Which containerd
  line may be given which schema is the placement's decision (``placement.py``).
- containerd 1.x drops its built-in runtimes when the file has a ``runtimes`` table, so a
  schema 1 or 2 file that gains its first table is also given the built-in default handlers
  (marked as seeded and owned, removed again with the last handler).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from wcow_agent.config import toml_text
from wcow_agent.config.merge_decision import (
    BUILTIN_RUNTIMES_1_7,
    RUNTIMES_PATHS,
    ConfigError,
    config_version,
    decide,
    marked_handlers,
)
from wcow_agent.config.merge_splice import edit


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
    give_back: Mapping[str, Mapping[str, Any]] | None = None,
    parse: toml_text.Parse = tomllib.loads,
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
    back when the agent no longer wants that handler; ``give_back`` tables taken out of
    this file for the agent's drop-in or template, written back unmarked. ``parse`` reads
    ``text`` (a
    ``toml_text.ParseOnce`` shares the document with the agent's other readers of the file).
    """
    data = _parsed(text, parse)
    version = config_version(data, fallback_version)
    path = RUNTIMES_PATHS[version]
    decision = decide(
        data,
        version,
        marked_handlers(text, path),
        desired=desired,
        owned=owned,
        builtin_runtimes=builtin_runtimes,
        adopt=adopt,
        adopted=adopted,
        give_back=give_back,
    )
    # A schema-1 file stays one: containerd reads its names only without a version.
    version_line = "" if "version" in data or version == 1 else f"version = {version}"
    merged = edit(text, data, decision, version_line)
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


def _parsed(text: str, parse: toml_text.Parse) -> Mapping[str, Any]:
    try:
        return parse(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError("config.toml is refused: values nested too deeply") from None
