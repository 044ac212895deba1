"""containerd on a simulated node: its view of config.toml and the files it imports (the
runtimes and pause image it would run with, why it would not start, what ``config default``
prints) and the service (version, ``config dump``, restart).

Imports are resolved as containerd does (``config/imports.py``, through the node's
``NodePaths``) and merged as each line does: 1.x replaces a whole plugin table with an
imported one, 2.x merges tables key by key. A schema-1 file loads natively on 1.x and is
migrated by 2.3+, while 2.0-2.2 load it without its CRI settings (the placement's reason
not to write there).
"""

from __future__ import annotations

import copy
import functools
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from wcow_agent.config.containerd_lines import config_version_for, version_tuple
from wcow_agent.config.imports import LoadedFile, LoadOrder, load_order
from wcow_agent.config.merge_decision import (
    BUILTIN_RUNTIMES_1_6,
    BUILTIN_RUNTIMES_1_7,
    RUNTIMES_PATHS,
)
from wcow_agent.config.sandbox_image import configured_pause_image
from wcow_agent.host.interfaces import ContainerdError
from wcow_agent.simulator.faults import SimulatedCrash
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

if TYPE_CHECKING:
    from wcow_agent.simulator.node import SimulatedNode


def builtin_runtimes(containerd_version: str) -> Mapping[str, Mapping[str, Any]]:
    return (
        BUILTIN_RUNTIMES_1_6 if version_tuple(containerd_version) < (1, 7) else BUILTIN_RUNTIMES_1_7
    )


@functools.lru_cache(maxsize=64)
def _document(text: str) -> Mapping[str, Any]:
    """config.toml parsed, once per text for every simulated node of the process: the
    simulated containerd reads each file several times (load, dump, restart, sandboxes), and
    a fleet of nodes in one process holds the same few texts. Shared: read it, never change
    it (what leaves this module is copied)."""
    return tomllib.loads(text)


def _cri_of(document: Mapping[str, Any], containerd_version: str) -> dict[str, Any] | None:
    """The ``containerd`` table of a file's CRI runtime plugin, by its own schema (None:
    the file sets none, or this line does not read it)."""
    version = document.get("version", 1 if "plugins" in document else None)
    if version is None:
        return None
    line = version_tuple(containerd_version)
    if version == 1 and (2, 0) <= line < (2, 3):
        return None  # 2.0-2.2 migrate a schema-1 file without its CRI settings
    path = RUNTIMES_PATHS.get(version) if isinstance(version, int) else None
    node: Any = document
    for name in path[:-1] if path else ("-",):
        node = node.get(name) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _merged(base: Any, over: Any) -> Any:
    """2.x: tables merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {k: _merged(base.get(k), v) if k in base else v for k, v in over.items()} | {
            k: v for k, v in base.items() if k not in over
        }
    return copy.deepcopy(over)


def effective_runtimes(
    text: str | None, containerd_version: str, imported: Sequence[str] = ()
) -> tuple[dict[str, Any], str]:
    """(runtimes, default runtime name) containerd would run with this config.toml and the
    texts it imports (in load order)."""
    major = version_tuple(containerd_version)[0]
    builtins = builtin_runtimes(containerd_version)
    sections = [
        section
        for file in ([text] if text else []) + list(imported)
        if (section := _cri_of(_document(file), containerd_version)) is not None
    ]
    if major < 2:
        # A later file's CRI table replaces the whole table; go-toml v1 rebuilds the map:
        # a runtimes table replaces the built-in handlers.
        containerd = sections[-1] if sections else {}
        declared = copy.deepcopy(containerd.get("runtimes", {}))
        runtimes = dict(declared) if declared else {k: dict(v) for k, v in builtins.items()}
        return runtimes, containerd.get("default_runtime_name", "runhcs-wcow-process")
    merged: dict[str, Any] = {"runtimes": {k: dict(v) for k, v in builtins.items()}}
    for section in sections:
        merged = _merged(merged, section)
    return merged["runtimes"], merged.get("default_runtime_name", "runhcs-wcow-process")


def effective_pause_image(
    text: str | None, containerd_version: str, imported: Sequence[str] = ()
) -> str:
    """The pause image containerd runs with this file (and its imports, the last one that
    names it winning): the files' key, else the line's default (1.7
    ``pkg/cri/config/config_windows.go``; 2.0 ``internal/cri/config`` ``DefaultSandboxImage``)."""
    lost_v1 = (2, 0) <= version_tuple(containerd_version) < (2, 3)
    named = None
    for file in ([text] if text else []) + list(imported):
        document = _document(file)
        if lost_v1 and "version" not in document:
            continue  # 2.0-2.2 drop a schema-1 file's CRI settings
        named = configured_pause_image(document) or named
    if named:
        return named
    if version_tuple(containerd_version)[0] < 2:
        return "registry.k8s.io/pause:3.8"
    return "registry.k8s.io/pause:3.10"


def imported_texts(node: SimulatedNode, root: Path, text: str) -> LoadOrder:
    """The files containerd loads for the root at ``root`` (through the node's paths)."""
    loaded = LoadedFile(node.paths.written(root), root, text, _document(text))
    return load_order(loaded, node.paths, _read)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_problem(
    text: str | None, containerd_version: str, imported: Sequence[str] = ()
) -> str | None:
    """Why containerd would not start with this file and its imports (None: it would)."""
    if text is None:
        return None
    try:
        document = _document(text)
    except tomllib.TOMLDecodeError as error:
        return f"failed to load TOML: {error}"
    version = document.get("version", 1)
    if not isinstance(version, int) or version not in RUNTIMES_PATHS:
        return f"unsupported config version {version!r}"
    if version > config_version_for(containerd_version):
        return f"config version {version} is newer than containerd {containerd_version} reads"
    for file in imported:
        try:
            _document(file)
        except tomllib.TOMLDecodeError as error:
            return f"failed to load TOML of an import: {error}"
    runtimes, default = effective_runtimes(text, containerd_version, imported)
    problems = (runtime_problem(name, table) for name, table in runtimes.items())
    problem = next((p for p in problems if p), None)
    if problem is None and version_tuple(containerd_version)[0] < 2 and default not in runtimes:
        problem = f'default runtime "{default}" is not configured'
    return problem


def runtime_problem(name: str, table: Any) -> str | None:
    """Why containerd cannot decode one runtime table (its CRI plugin would not load)."""
    where = f"runtime {name!r}"
    if not isinstance(table, dict):
        return f"{where}: not a table"
    runtime_type = table.get("runtime_type")
    if not isinstance(runtime_type, str) or not runtime_type:
        return f"{where}: runtime_type must be a non-empty string"
    if not isinstance(table.get("options", {}), dict):
        return f"{where}: options must be a table"
    for key in ("pod_annotations", "container_annotations"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{where}: {key} must be a list of strings"
    return None


def default_config(containerd_version: str) -> str:
    """What ``containerd config default`` prints on Windows (the parts the agent reads)."""
    version = config_version_for(containerd_version)
    runtimes = {k: dict(v) for k, v in builtin_runtimes(containerd_version).items()}
    if version == 2:
        cri: dict[str, Any] = {
            "sandbox_image": "mcr.microsoft.com/oss/kubernetes/pause:3.9",
            "containerd": {
                "snapshotter": "windows",
                "default_runtime_name": "runhcs-wcow-process",
                "runtimes": runtimes,
            },
            "cni": {
                "bin_dir": r"C:\Program Files\containerd\cni\bin",
                "conf_dir": r"C:\Program Files\containerd\cni\conf",
            },
        }
        plugins: dict[str, Any] = {"io.containerd.grpc.v1.cri": cri}
    else:
        plugins = {
            "io.containerd.cri.v1.images": {
                "snapshotter": "windows",
                "pinned_images": {"sandbox": "registry.k8s.io/pause:3.10"},
            },
            "io.containerd.cri.v1.runtime": {
                "containerd": {"default_runtime_name": "runhcs-wcow-process", "runtimes": runtimes},
                "cni": {
                    "bin_dirs": [r"C:\Program Files\containerd\cni\bin"],
                    "conf_dir": r"C:\Program Files\containerd\cni\conf",
                },
            },
        }
    return tomli_w.dumps(
        {
            "version": version,
            "root": r"C:\ProgramData\containerd\root",
            "state": r"C:\ProgramData\containerd\state",
            "plugins": plugins,
        }
    )


class SimulatedContainerd:
    """The containerd service: every call is one of the node's host calls (``node.call``)."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def version(self) -> str:
        self.node.call("containerd --version")
        return self.node.settings.containerd_version

    def config_default(self) -> str:
        self.node.call("containerd config default")
        return self.node.default_config_text()

    def config_dump(self, config: Path) -> str:
        node = self.node
        node.call("containerd config dump")
        node.record("preflight")
        text = config.read_text(encoding="utf-8")
        version = node.settings.containerd_version
        order = imported_texts(node, config, text)
        imported = [f.text for f in order.imported]
        problem = order.problem or load_problem(text, version, imported)
        if problem:
            raise ContainerdError(f"`containerd --config {config} config dump` failed: {problem}")
        runtimes, default = effective_runtimes(text, version, imported)
        parsed = _document(text)
        dump: dict[str, Any] = {k: copy.deepcopy(v) for k, v in parsed.items() if k != "plugins"}
        schema = config_version_for(version)
        dump["version"] = schema
        here = dump
        for name in RUNTIMES_PATH[schema][:-1]:
            here = here.setdefault(name, {})
        here["default_runtime_name"] = default
        here["runtimes"] = runtimes
        pause = effective_pause_image(text, version, imported)
        if schema == 2:
            dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] = pause
        else:
            images = dump["plugins"].setdefault("io.containerd.cri.v1.images", {})
            images["pinned_images"] = {"sandbox": pause}
        return tomli_w.dumps(dump)

    def restart(self, timeout: float) -> None:
        node = self.node
        node.call("containerd restart")
        with node.lock:
            if node.faults.kills_left > 0 and node.disk_text() != node.running_text:
                node.faults.kills_left -= 1
                node.record("killed", "the agent died before restarting containerd")
                raise SimulatedCrash(f"{node.name}: agent killed mid-apply")
            node.record("restart")
            node.restarted_with.append(node.disk_text())
            node.running = False
            node.running_text = None
            for sandbox in list(node.sandboxes.values()):
                # A restart keeps running sandboxes in HCS; canaries are removed anyway.
                sandbox.state = "SANDBOX_NOTREADY"
        time.sleep(min(node.settings.restart_seconds, timeout))
        node.before_start()
        text = node.disk_text()
        imported: list[str] = []
        why = None
        if text is not None:
            order = imported_texts(node, node.config, text)
            imported, why = [f.text for f in order.imported], order.problem
        why = why or self._refusal(text, imported)
        with node.lock:
            if why:
                node.record("restart-failed", why)
                if node.faults.refuse_mode == "cri":
                    return  # the service runs; CRI never answers
                raise ContainerdError(
                    "Restart-Service containerd failed: Failed to start service "
                    f"'containerd (containerd)'. {why}"
                )
            node.running_text = text
            node.running_imports = tuple(imported)
            node.running = True
            node.record("restarted")

    def _refusal(self, text: str | None, imported: Sequence[str]) -> str | None:
        """Why containerd does not come up with this file: it does not load, or a fault."""
        problem = load_problem(text, self.node.settings.containerd_version, imported)
        if problem:
            return problem
        refuse = self.node.faults.refuse
        return self._refused(text, imported) or (refuse(text) if refuse is not None else None)

    def _refused(self, text: str | None, imported: Sequence[str]) -> str | None:
        """The restart-fail fault: containerd will not start with these handlers, or with
        this pause image."""
        wanted = self.node.faults.restart_fail
        if not wanted or (text == self.node.seeded_text and not imported):
            return None
        version = self.node.settings.containerd_version
        runtimes = effective_runtimes(text, version, imported)[0]
        pause = effective_pause_image(text, version, imported)
        hit = sorted(h for h in [*runtimes, pause] if h in wanted) or (
            ["*"] if "*" in wanted else []
        )
        if hit:
            return f"simulated fault: containerd does not start with {', '.join(hit)}"
        return None
