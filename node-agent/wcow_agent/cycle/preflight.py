"""The pre-flight: the node's own containerd loads the candidate configuration (``config
dump``) before anything is replaced, and the agent checks what it would run with."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from wcow_agent.config.candidate import write_candidate
from wcow_agent.config.merge_decision import RUNTIMES_PATHS
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.placed import Placed
from wcow_agent.cycle.decisions import HostFacts
from wcow_agent.host.interfaces import ContainerdError, Host


def preflight(host: Host, files: NodeFiles, placed: Placed, facts: HostFacts) -> str | None:
    """Why containerd would not run the change (None: it would): it cannot load the
    candidate, or its default runtime or one of the agent's handlers would be missing."""
    candidate = write_candidate(placed, files)
    try:
        dump = host.containerd.config_dump(candidate.root)
    except ContainerdError as error:
        return f"containerd {facts.containerd_version or ''} cannot load the merged file: {error}"
    finally:
        candidate.discard()
    try:
        effective = tomllib.loads(dump)
    except tomllib.TOMLDecodeError:
        return None  # an unexpected dump format proves nothing either way
    runtimes, default = dumped_runtimes(effective)
    if runtimes is None:
        return None
    if default and default not in runtimes:
        return (
            f"with the merged file containerd would have no default runtime {default!r} "
            "(containerd 1.x drops its built-in runtimes when the file defines any)"
        )
    result = placed.result
    missing = sorted(h for h in result.owned if h not in runtimes)
    if missing:
        return (
            f"containerd does not see handler(s) {', '.join(missing)} in the merged file "
            f"(config version {result.version} on containerd {facts.containerd_version})"
        )
    return None


def dumped_runtimes(effective: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(runtimes map, default runtime name) of a ``config dump`` (1.7 dumps a schema-1
    file under its own names)."""
    version = effective.get("version")
    paths = [RUNTIMES_PATHS[version]] if version in RUNTIMES_PATHS else []
    for path in [*paths, RUNTIMES_PATHS[1]]:
        node: Any = effective
        for name in path[:-1]:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            runtimes = node.get(path[-1])
            default = node.get("default_runtime_name")
            return (
                runtimes if isinstance(runtimes, dict) else {},
                default if isinstance(default, str) else None,
            )
    return None, None
