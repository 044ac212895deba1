"""What a merge decides, on the parsed data alone: which of the agent's runtime tables to
add, replace, remove or give back, and which are another's (``Decision``).

Also what that rests on: the file's schema version (where the runtimes map is, schema 1
included: ``RUNTIMES_PATHS``), the marker on the agent's own tables, containerd 1.x's
built-in runtimes, and ``ConfigError`` for a file the agent must not edit. ``merge.py`` runs
the merge; ``merge_splice.py`` writes the decision into the text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from wcow_agent.config import toml_text
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

# Where runtime handlers live, by config schema: the plan's paths (versions 2 to 4) and
# schema 1, which the agent meets on AKS Windows Server 2022 and kube-up/GKE nodes (no
# `version`, the CRI plugin under its short name: containerd 1.7
# services/server/config/config.go reads the plugin ID `cri` when version is 1).
RUNTIMES_PATHS: dict[int, tuple[str, ...]] = {
    1: ("plugins", "cri", "containerd", "runtimes"),
    **RUNTIMES_PATH,
}

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


def config_version(document: Mapping[str, Any], fallback: int | None = None) -> int:
    """The file's schema version; containerd reads a file without ``version`` as 1 (the
    agent writes such a file's tables in schema 1's names and never adds a ``version``).

    A file without ``version`` and without any ``plugins`` table holds nothing whose
    layout depends on the version; it gets ``fallback`` (the schema of the node's
    containerd) when given."""
    if "version" not in document and fallback is not None and "plugins" not in document:
        return fallback
    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"config.toml: version must be an integer, not {version!r}")
    if version not in RUNTIMES_PATHS:
        raise ConfigError(
            f"config.toml has schema version {version}; wcow-agent knows versions "
            f"{', '.join(map(str, RUNTIMES_PATHS))}"
        )
    return version


def _plain(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


def _default_runtime_name(document: Mapping[str, Any], version: int) -> str:
    containerd = _plain(document)
    for name in RUNTIMES_PATHS[version][:-1]:
        containerd = containerd.get(name, {}) if isinstance(containerd, dict) else {}
    default = containerd.get("default_runtime_name") if isinstance(containerd, dict) else None
    return default if isinstance(default, str) and default else DEFAULT_RUNTIME


def marked_handlers(text: str, path: tuple[str, ...]) -> set[str]:
    """Handlers whose table header carries the agent's marker (only those lines are read:
    a rerun with nothing to do stays cheap)."""
    marked = set()
    position = text.find(MARKER)
    while position >= 0:
        start = text.rfind("\n", 0, position) + 1
        end = text.find("\n", position)
        found = toml_text.scan_headers([text[start : end if end >= 0 else len(text)]]).headers
        if found and len(found[0].path) > len(path) and found[0].path[: len(path)] == path:
            marked.add(found[0].path[len(path)])
        position = text.find(MARKER, position + len(MARKER))
    return marked


@dataclass
class Decision:
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


def runtimes_data(data: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = data
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
        if not isinstance(node, dict):
            raise ConfigError(f"config.toml: {'.'.join(path)} is not a table ({name!r})")
    table: dict[str, Any] = node
    return table


def decide(
    data: Mapping[str, Any],
    version: int,
    marked: set[str],
    *,
    desired: Mapping[str, Mapping[str, Any]],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]],
    adopt: Collection[str] = (),
    adopted: Mapping[str, Mapping[str, Any]] | None = None,
    give_back: Mapping[str, Mapping[str, Any]] | None = None,
) -> Decision:
    """``give_back``: hand-written tables the agent took out of this file to adopt them
    into its own drop-in or template, written back here (unmarked) as it lets go."""
    path = RUNTIMES_PATHS[version]
    adopted = adopted or {}
    runtimes = runtimes_data(data, path) or {}
    decision = Decision(version, path)

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
    _give_back(runtimes, give_back or {}, decision)
    if version in (1, 2):
        _keep_default_runtime(data, runtimes, owned, builtin_runtimes, decision)
    return decision


def _give_back(
    runtimes: Mapping[str, Any], tables: Mapping[str, Mapping[str, Any]], decision: Decision
) -> None:
    """Hand-written tables the agent took out of this file, written back unmarked."""
    for handler, table in sorted(tables.items()):
        if handler not in runtimes and handler not in decision.put:
            decision.put[handler] = dict(table)
            decision.restored.append(handler)


def _keep_default_runtime(
    data: Mapping[str, Any],
    runtimes: Mapping[str, Any],
    owned: Mapping[str, str],
    builtin_runtimes: Mapping[str, Mapping[str, Any]],
    decision: Decision,
) -> None:
    """containerd 1.x: a file with runtimes must define the default runtime itself
    (schemas 1 and 2, the ones 1.x reads)."""
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
        default = _default_runtime_name(data, decision.version)
        if default not in after:
            raise ConfigError(
                f"config.toml (version {decision.version}) defines runtimes but not its "
                f"default runtime {default!r}; containerd 1.x would not start with it. Add "
                "that runtime or fix default_runtime_name first"
            )
        return
    # The file had no runtimes, so containerd used its built-ins; ours would replace them.
    for handler in sorted(builtin_runtimes):
        if handler not in decision.put:
            decision.put[handler] = builtin_runtimes[handler]
            decision.owned[handler] = "seeded"
            decision.added.append(handler)
