"""A Windows node in memory: containerd, CRI and HCS that follow the config.toml on disk.

``wcow-agent simulate`` runs the real agent loop (plan watch, eligibility, merge, write,
restart, canary, labels, status) against this host on Linux. Only this layer differs from a
Windows node, and it behaves as the real one does where the agent can tell:

- config.toml is a real file in a directory; ``config dump`` and a restart load it with
  tomllib and containerd's rules: a file that does not parse, or a runtime table of the
  wrong shape, keeps containerd from starting (CRI stops answering); containerd 1.x loses
  its built-in runtimes when the file defines any; each line drops the runhcs options its
  hcsshim does not know (``containerd_lines``);
- a canary sandbox runs with the handler containerd loaded, and HCS reports what that
  handler really configures: a ``VirtualMachine`` ``<id>@vm`` only with
  ``SandboxIsolation = 1`` (and refused where Hyper-V is absent), its vCPUs and memory from
  ``VmProcessorCount`` / ``VmMemorySizeInMb`` (or the pod annotations hcsshim prefers) with
  hcsshim's defaults (2 vCPUs, 1 on a one-processor host; 1024 MB), memory rounded up to an
  even MB, vCPUs capped at the host's logical processors; an option of the wrong type, an
  unknown LogLevel or DebugType FILE make the sandbox fail as the shim does;
- faults: a handler's sandbox fails, containerd refuses to start with a handler, canaries
  take longer, the agent dies between writing config.toml and restarting containerd.

Every step the agent asks of the host goes into a journal with its time, so a test or a
benchmark can tell from the nodes themselves when each one applied.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import itertools
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

import tomli_w

from wcow_agent.containerd_lines import line_for
from wcow_agent.host.containerd import config_version_for, version_tuple
from wcow_agent.host.interfaces import (
    CancelledError,
    CommandTimeoutError,
    ContainerdError,
    CriError,
    CriStatus,
    HcsError,
    Host,
    SandboxStatus,
)
from wcow_agent.images import configured_pause_image
from wcow_agent.merge import BUILTIN_RUNTIMES_1_6, BUILTIN_RUNTIMES_1_7
from wcow_contract.catalog.runhcs_options import LOG_LEVELS, RUNHCS_OPTIONS
from wcow_contract.catalog.windows_builds import (
    WindowsBuild,
    hyperv_can_run,
    parse_windows_build,
    process_can_run,
)
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

SHIM = "containerd-shim-runhcs-v1.exe"
# The only shim binary on a simulated host: beside containerd.exe, as the release ships it.
SHIM_PATH = rf"C:\Program Files\containerd\{SHIM}"
RUNHCS = "io.containerd.runhcs.v1"
HCS_E_SYSTEM_NOT_FOUND = 0x8037010E
DEFAULT_VM_MEMORY_MB = 1024
MEMORY_ANNOTATION = "io.microsoft.virtualmachine.computetopology.memory.sizeinmb"
PROCESSOR_ANNOTATION = "io.microsoft.virtualmachine.computetopology.processor.count"
FAULT_KINDS = ("canary-fail", "restart-fail", "slow-canary", "kill-mid-apply", "pull-fail")
IMAGE_MISMATCH = (
    "hcs::CreateComputeSystem: The container operating system does not match the host "
    "operating system."
)
# MCR tags name their build; an index of several builds gives the host's entry.
_TAG_BUILDS = {"ltsc2019": "10.0.17763", "1809": "10.0.17763", "ltsc2022": "10.0.20348"}
_TAG_BUILDS["ltsc2025"] = "10.0.26100"


class SimulatedCrash(BaseException):
    """The agent process dies here. Raised from inside a host call and not an Exception,
    so the agent's own error handling does not catch it: the thread running it ends."""


# -- faults ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One ``--fault KIND[=VALUE][@NODES]``: NODES is a node name or a glob (all nodes when
    absent). canary-fail[=HANDLER], restart-fail[=HANDLER|IMAGE], slow-canary=SECONDS,
    kill-mid-apply[=TIMES], pull-fail[=IMAGE]."""

    kind: str
    value: str | None = None
    nodes: str = "*"

    def applies_to(self, node: str) -> bool:
        return fnmatch.fnmatchcase(node, self.nodes)


def parse_fault(text: str) -> Fault:
    body, _, nodes = text.partition("@")
    kind, has_value, value = body.partition("=")
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"--fault {text!r}: unknown kind {kind!r} (one of {', '.join(FAULT_KINDS)})"
        )
    if has_value and not value:
        raise ValueError(f"--fault {text!r}: empty value after '='")
    if kind == "slow-canary":
        if not has_value:
            raise ValueError(f"--fault {text!r}: slow-canary needs =SECONDS")
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"--fault {text!r}: {value!r} is not a number of seconds") from None
        if seconds < 0:
            raise ValueError(f"--fault {text!r}: seconds must not be negative")
    if kind == "kill-mid-apply" and has_value and not value.isdigit():
        raise ValueError(f"--fault {text!r}: {value!r} is not a number of times")
    if "@" in text and not nodes:
        raise ValueError(f"--fault {text!r}: empty node name after '@'")
    return Fault(kind, value if has_value else None, nodes or "*")


@dataclass
class Faults:
    """What goes wrong on one node (changeable while it runs: tests flip them)."""

    canary_fail: set[str] = field(default_factory=set)  # handlers; "*" for all
    restart_fail: set[str] = field(default_factory=set)  # handlers; "*" for any agent file
    slow_canary_seconds: float = 0.0
    kills_left: int = 0  # times the agent dies between writing config.toml and restarting
    pull_fail: set[str] = field(default_factory=set)  # image references; "*" for all

    @classmethod
    def for_node(cls, node: str, faults: Sequence[Fault]) -> Faults:
        result = cls()
        for fault in faults:
            if not fault.applies_to(node):
                continue
            if fault.kind == "canary-fail":
                result.canary_fail.add(fault.value or "*")
            elif fault.kind == "restart-fail":
                result.restart_fail.add(fault.value or "*")
            elif fault.kind == "slow-canary":
                result.slow_canary_seconds += float(fault.value or 0)
            elif fault.kind == "pull-fail":
                result.pull_fail.add(fault.value or "*")
            else:
                result.kills_left += int(fault.value or 1)
        return result


# -- containerd's view of config.toml -----------------------------------------------------


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


def effective_runtimes(text: str | None, containerd_version: str) -> tuple[dict[str, Any], str]:
    """(runtimes, default runtime name) containerd would run with this config.toml."""
    major = version_tuple(containerd_version)[0]
    builtins = builtin_runtimes(containerd_version)
    document = _document(text) if text else {}
    version = document.get("version", 1)
    node: Any = document
    for name in RUNTIMES_PATH.get(version, ("-",))[:-1]:
        node = node.get(name, {}) if isinstance(node, dict) else {}
    declared = copy.deepcopy(node.get("runtimes", {})) if isinstance(node, dict) else {}
    default = node.get("default_runtime_name", "runhcs-wcow-process")
    if major < 2:
        # go-toml v1 rebuilds the map: a runtimes table replaces the built-in handlers.
        runtimes = dict(declared) if declared else {k: dict(v) for k, v in builtins.items()}
    else:
        runtimes = {**{k: dict(v) for k, v in builtins.items()}, **declared}
    return runtimes, default


def effective_pause_image(text: str | None, containerd_version: str) -> str:
    """The pause image containerd runs with this file: the file's key, else the line's
    default (1.7 ``pkg/cri/config/config_windows.go``; 2.0 ``internal/cri/config``
    ``DefaultSandboxImage``)."""
    named = configured_pause_image(_document(text)) if text else None
    if named:
        return named
    if version_tuple(containerd_version)[0] < 2:
        return "registry.k8s.io/pause:3.8"
    return "registry.k8s.io/pause:3.10"


def load_problem(text: str | None, containerd_version: str) -> str | None:
    """Why containerd would not start with this file (None: it would)."""
    if text is None:
        return None
    try:
        document = _document(text)
    except tomllib.TOMLDecodeError as error:
        return f"failed to load TOML: {error}"
    version = document.get("version", 1)
    if not isinstance(version, int) or version not in (1, *RUNTIMES_PATH):
        return f"unsupported config version {version!r}"
    if version > config_version_for(containerd_version):
        return f"config version {version} is newer than containerd {containerd_version} reads"
    runtimes, default = effective_runtimes(text, containerd_version)
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


@dataclass(frozen=True)
class VmSize:
    processors: int
    memory_mb: int


def honoured_options(table: Mapping[str, Any], containerd_version: str) -> dict[str, Any]:
    """The runhcs options the shim receives: containerd drops keys its hcsshim lacks."""
    known = line_for(containerd_version).options
    options = table.get("options") or {}
    return {k: v for k, v in options.items() if k in known}


def option_problem(options: Mapping[str, Any]) -> str | None:
    """Why the shim refuses these options (decoding, LogLevel, DebugType FILE)."""
    for key, value in sorted(options.items()):
        spec = RUNHCS_OPTIONS.get(key)
        if spec is None:
            continue
        ok = isinstance(value, spec.kind) and not (spec.kind is int and isinstance(value, bool))
        if not ok:
            kind = spec.kind.__name__
            return f"failed to decode runtime options: {key}: cannot use {value!r} as {kind}"
    level = options.get("LogLevel")
    if level and str(level).lower() not in LOG_LEVELS:
        return f'failed to start shim: not a valid logrus Level: "{level}"'
    if options.get("DebugType") == 1:
        return "failed to start shim: panic: FILE debug type not supported"
    return None


def vm_size(options: Mapping[str, Any], logical_processors: int) -> VmSize:
    """The utility VM hcsshim creates: pod annotation, else runtime option, else default;
    memory rounded up to an even MB, vCPUs capped at the host's logical processors."""
    annotations = options.get("DefaultContainerAnnotations") or {}

    def number(annotation: str, option: str) -> int:
        try:
            value = int(annotations.get(annotation, 0))
        except ValueError:  # hcsshim logs an unparsable annotation and keeps the default
            value = 0
        return value or int(options.get(option) or 0)

    default_processors = 1 if logical_processors == 1 else 2
    processors = number(PROCESSOR_ANNOTATION, "VmProcessorCount") or default_processors
    memory = number(MEMORY_ANNOTATION, "VmMemorySizeInMb") or DEFAULT_VM_MEMORY_MB
    return VmSize(min(processors, logical_processors), (memory + 1) & ~1)


# -- the node --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JournalEntry:
    time: float  # time.time()
    node: str
    event: str
    detail: str = ""


@dataclass
class _Sandbox:
    id: str
    handler: str
    labels: dict[str, str]
    state: str = "SANDBOX_READY"
    containers: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class HostSettings:
    build: str = "10.0.20348"
    hyperv: bool = True
    containerd_version: str = "1.7.20"
    logical_processors: int = 8
    restart_seconds: float = 0.0
    canary_seconds: float = 0.0
    pause_build: str | None = None
    """The build of the pause image this node pulls (None: the host's, as containerd picks
    from a multi-build index); another build makes a node pool for that guest build."""
    image_builds: tuple[tuple[str, str], ...] = ()
    """(reference, build) of other images; else the build an MCR tag names, else the host's."""

    def __post_init__(self) -> None:
        parse_windows_build(self.build)
        for build in [self.pause_build or self.build, *(b for _, b in self.image_builds)]:
            parse_windows_build(build)
        line_for(self.containerd_version)
        if self.logical_processors < 1:
            raise ValueError(
                f"logical_processors must be at least 1, not {self.logical_processors}"
            )


class SimulatedNode:
    """One Windows host: its disk (``root``), containerd service, CRI and HCS.

    config.toml is seeded with containerd's default when missing, as a node's installer
    does. containerd starts running that file."""

    def __init__(
        self,
        name: str,
        root: Path,
        settings: HostSettings | None = None,
        faults: Faults | None = None,
        *,
        journal: Callable[[JournalEntry], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.name = name
        self.root = root
        self.settings = settings or HostSettings()
        self.faults = faults or Faults()
        self.cancel = cancel or threading.Event()
        self._journal_sink = journal
        self.journal: list[JournalEntry] = []
        self.lock = threading.RLock()
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "config.toml"
        if not self.config.exists():
            self.config.write_text(default_config(self.settings.containerd_version), "utf-8")
        self.seeded_text = self.config.read_text(encoding="utf-8")
        self.running_text: str | None = self.seeded_text
        self.running = load_problem(self.seeded_text, self.settings.containerd_version) is None
        self.restarts = 0
        self.sandboxes: dict[str, _Sandbox] = {}
        self.systems: dict[str, dict[str, Any]] = {}
        self.images: dict[str, str] = {}  # reference pulled -> its build
        self._ids = itertools.count(1)

    def record(self, event: str, detail: str = "") -> None:
        entry = JournalEntry(time.time(), self.name, event, detail)
        with self.lock:
            self.journal.append(entry)
        if self._journal_sink is not None:
            self._journal_sink(entry)

    def image_build(self, image: str) -> str:
        """The build of what a CRI pull of ``image`` gets on this host."""
        given = dict(self.settings.image_builds)
        if image in given:  # a pause image set by --pause-image too
            return parse_windows_build(given[image]).label_value
        if image == self.pause_image():
            return self.settings.pause_build or self.settings.build
        tag = image.rsplit("/", 1)[-1].partition("@")[0].rpartition(":")[2]
        return _TAG_BUILDS.get(tag, parse_windows_build(self.settings.build).label_value)

    def pause_image(self) -> str:
        """The pause image of the configuration containerd runs."""
        return effective_pause_image(
            self.running_text or self.seeded_text, self.settings.containerd_version
        )

    def loaded_runtimes(self) -> dict[str, Any]:
        return effective_runtimes(self.running_text, self.settings.containerd_version)[0]

    def disk_text(self) -> str | None:
        return self.config.read_text(encoding="utf-8") if self.config.exists() else None

    def host(self) -> Host:
        return Host(
            windows=SimulatedWindows(self),
            containerd=SimulatedContainerd(self),
            cri=SimulatedCri(self),
            hcs=SimulatedHcs(self),
        )

    def wait(self, seconds: float, timeout: float, what: str) -> None:
        """Take ``seconds`` (a slow host), bounded by the caller's timeout and stop."""
        if seconds <= 0:
            return
        if self.cancel.wait(min(seconds, timeout)):
            raise CancelledError(f"{what}: the agent is stopping")
        if seconds > timeout:
            raise CommandTimeoutError(f"{what} did not finish in {timeout:.0f} s (killed)")


class SimulatedWindows:
    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def windows_build(self) -> WindowsBuild:
        return parse_windows_build(self.node.settings.build)

    def hyperv_available(self) -> bool:
        return self.node.settings.hyperv


class SimulatedContainerd:
    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def version(self) -> str:
        return self.node.settings.containerd_version

    def config_default(self) -> str:
        return default_config(self.node.settings.containerd_version)

    def config_dump(self, config: Path) -> str:
        node = self.node
        node.record("preflight")
        text = config.read_text(encoding="utf-8")
        version = node.settings.containerd_version
        problem = load_problem(text, version)
        if problem:
            raise ContainerdError(f"`containerd --config {config} config dump` failed: {problem}")
        runtimes, default = effective_runtimes(text, version)
        parsed = _document(text)
        dump: dict[str, Any] = {k: copy.deepcopy(v) for k, v in parsed.items() if k != "plugins"}
        schema = config_version_for(version)
        dump["version"] = schema
        here = dump
        for name in RUNTIMES_PATH[schema][:-1]:
            here = here.setdefault(name, {})
        here["default_runtime_name"] = default
        here["runtimes"] = runtimes
        pause = effective_pause_image(text, version)
        if schema == 2:
            dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] = pause
        else:
            images = dump["plugins"].setdefault("io.containerd.cri.v1.images", {})
            images["pinned_images"] = {"sandbox": pause}
        return tomli_w.dumps(dump)

    def restart(self, timeout: float) -> None:
        node = self.node
        with node.lock:
            if node.faults.kills_left > 0 and node.disk_text() != node.running_text:
                node.faults.kills_left -= 1
                node.record("killed", "the agent died before restarting containerd")
                raise SimulatedCrash(f"{node.name}: agent killed mid-apply")
            node.record("restart")
            node.restarts += 1
            node.running = False
            node.running_text = None
            for sandbox in list(node.sandboxes.values()):
                # A restart keeps running sandboxes in HCS; canaries are removed anyway.
                sandbox.state = "SANDBOX_NOTREADY"
        time.sleep(min(node.settings.restart_seconds, timeout))
        text = node.disk_text()
        problem = load_problem(text, node.settings.containerd_version)
        refused = self._refused(text) if problem is None else None
        with node.lock:
            if problem or refused:
                node.record("restart-failed", problem or refused or "")
                raise ContainerdError(
                    "Restart-Service containerd failed: Failed to start service "
                    f"'containerd (containerd)'. {problem or refused}"
                )
            node.running_text = text
            node.running = True
            node.record("restarted")

    def _refused(self, text: str | None) -> str | None:
        """The restart-fail fault: containerd will not start with these handlers, or with
        this pause image."""
        wanted = self.node.faults.restart_fail
        if not wanted or text == self.node.seeded_text:
            return None
        version = self.node.settings.containerd_version
        runtimes = effective_runtimes(text, version)[0]
        pause = effective_pause_image(text, version)
        hit = sorted(h for h in [*runtimes, pause] if h in wanted) or (
            ["*"] if "*" in wanted else []
        )
        if hit:
            return f"simulated fault: containerd does not start with {', '.join(hit)}"
        return None


class SimulatedCri:
    """The CRI runtime service as the canary uses it."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def _up(self) -> None:
        if not self.node.running:
            raise CriError(
                "crictl: validate service connection: rpc error: code = Unavailable desc = "
                r"connection error: open \\.\pipe\containerd-containerd: The system cannot "
                "find the file specified."
            )

    def status(self, timeout: float) -> CriStatus:
        self._up()
        handlers = None
        if version_tuple(self.node.settings.containerd_version)[0] >= 2:
            handlers = tuple(sorted(self.node.loaded_runtimes()))
        return CriStatus(runtime_ready=True, network_ready=True, handlers=handlers)

    def run_pod_sandbox(self, config: Mapping[str, Any], handler: str, timeout: float) -> str:
        node = self.node
        self._up()
        metadata = config.get("metadata") or {}
        if not metadata.get("name") or not metadata.get("namespace"):
            raise CriError(
                "crictl runp: load podSandboxConfig: name or namespace is not in metadata"
            )
        node.record("sandbox-start", handler)
        node.wait(
            node.settings.canary_seconds + node.faults.slow_canary_seconds, timeout, "crictl runp"
        )
        runtimes = node.loaded_runtimes()
        problem = self._problem(handler, runtimes)
        if problem:
            node.record("sandbox-failed", f"{handler}: {problem}")
            raise CriError(
                f"crictl runp: run pod sandbox: rpc error: code = Unknown desc = {problem}"
            )
        table = runtimes[handler]
        options = honoured_options(table, node.settings.containerd_version)
        with node.lock:
            sandbox_id = uuid.uuid4().hex + uuid.uuid4().hex
            node.sandboxes[sandbox_id] = _Sandbox(
                sandbox_id, handler, dict(config.get("labels") or {})
            )
            system = {
                "Id": sandbox_id,
                "SystemType": "Container",
                "Name": sandbox_id,
                "Owner": "containerd-shim-runhcs-v1.exe",
                "RuntimeOsType": "Windows",
                "State": "Running",
            }
            if options.get("SandboxIsolation") == 1:
                size = vm_size(options, node.settings.logical_processors)
                owner = (
                    PureWindowsPath(table["runtime_path"]).name
                    if table.get("runtime_path")
                    else SHIM
                )
                node.systems[f"{sandbox_id}@vm"] = {
                    **system,
                    "Id": f"{sandbox_id}@vm",
                    "Name": f"{sandbox_id}@vm",
                    "SystemType": "VirtualMachine",
                    "Owner": owner,
                    "_size": size,
                }
            else:
                node.systems[sandbox_id] = system
        return sandbox_id

    def _problem(self, handler: str, runtimes: Mapping[str, Any]) -> str | None:
        node = self.node
        if handler not in runtimes:
            return f'failed to get sandbox runtime: no runtime for "{handler}" is configured'
        table = runtimes[handler]
        problem = _shim_problem(table)
        if problem:
            return problem
        options = honoured_options(table, node.settings.containerd_version)
        problem = option_problem(options)
        if problem:
            return problem
        if options.get("SandboxIsolation") == 1 and not node.settings.hyperv:
            return (
                "failed to create containerd task: HcsCreateComputeSystem: The virtual machine "
                "could not be started because a required feature is not installed."
            )
        if handler in node.faults.canary_fail or "*" in node.faults.canary_fail:
            return f"failed to create containerd task: simulated fault for {handler}"
        return self._pause_problem(options.get("SandboxIsolation") == 1)

    def _pause_problem(self, hyperv: bool) -> str | None:
        """The sandbox runs the pause image: process-isolated only on a compatible host
        build, in a utility VM only when the host is not older (hcsshim boots the VM from it)."""
        node = self.node
        image = node.pause_image()
        problem = self._pull_problem(image)
        if problem:
            return f"failed to get sandbox image {image!r}: {problem}"
        node.images[image] = node.image_build(image)
        pause, host = (
            parse_windows_build(node.images[image]),
            parse_windows_build(node.settings.build),
        )
        runs = hyperv_can_run(host, pause) if hyperv else process_can_run(host, pause)
        return None if runs else f"failed to create containerd task: {IMAGE_MISMATCH}"

    def _pull_problem(self, image: str) -> str | None:
        wanted = self.node.faults.pull_fail
        if image in wanted or "*" in wanted:
            return (
                f"rpc error: code = NotFound desc = failed to pull and unpack image {image!r}: "
                "simulated fault: not found"
            )
        return None

    def _get(self, sandbox_id: str) -> _Sandbox:
        sandbox = self.node.sandboxes.get(sandbox_id)
        if sandbox is None:
            raise CriError(f'crictl: pod sandbox "{sandbox_id}": rpc error: code = NotFound')
        return sandbox

    def pod_sandbox_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        self._up()
        sandbox = self._get(sandbox_id)
        return SandboxStatus(sandbox.id, sandbox.state, sandbox.handler, dict(sandbox.labels))

    def list_pod_sandboxes(self, labels: Mapping[str, str], timeout: float) -> list[SandboxStatus]:
        self._up()
        return [
            SandboxStatus(s.id, s.state, s.handler, dict(s.labels))
            for s in list(self.node.sandboxes.values())
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def stop_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._up()
        self._get(sandbox_id).state = "SANDBOX_NOTREADY"
        with self.node.lock:
            self.node.systems.pop(f"{sandbox_id}@vm", None)
            self.node.systems.pop(sandbox_id, None)

    def remove_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._up()
        with self.node.lock:
            sandbox = self.node.sandboxes.pop(sandbox_id, None)
            self.node.systems.pop(f"{sandbox_id}@vm", None)
            self.node.systems.pop(sandbox_id, None)
        if sandbox is None:
            raise CriError(f'crictl: pod sandbox "{sandbox_id}": rpc error: code = NotFound')
        self.node.record("sandbox-removed", sandbox.handler)

    def pull_image(self, image: str, timeout: float) -> None:
        self._up()
        problem = self._pull_problem(image)
        if problem:
            self.node.record("pull-failed", image)
            raise CriError(f"crictl pull failed: pulling image: {problem}")
        self.node.record("pulled", image)
        self.node.images[image] = self.node.image_build(image)

    def image_os_version(self, image: str, timeout: float) -> str | None:
        self._up()
        build = self.node.images.get(image)
        return None if build is None else f"{build}.1"

    def create_container(
        self,
        sandbox_id: str,
        container: Mapping[str, Any],
        sandbox: Mapping[str, Any],
        timeout: float,
    ) -> str:
        self._up()
        owner = self._get(sandbox_id)
        image = str((container.get("image") or {}).get("image", ""))
        build = self.node.images.get(image)
        if build is None:
            raise CriError(f"crictl create failed: image {image!r} not found")
        # The container runs against the VM's kernel (the pause image's build) or the host's.
        vm = self.node.systems.get(f"{sandbox_id}@vm")
        kernel = self.node.image_build(self.node.pause_image()) if vm else None
        kernel = kernel or self.node.settings.build
        if parse_windows_build(build).number != parse_windows_build(kernel).number and (
            vm or not process_can_run(parse_windows_build(kernel), parse_windows_build(build))
        ):
            raise CriError(f"crictl create failed: {IMAGE_MISMATCH}")
        container_id = f"{next(self.node._ids):064x}"
        owner.containers.add(container_id)
        self.node.record("container-created", image)
        return container_id

    def start_container(self, container_id: str, timeout: float) -> None:
        self._up()

    def exec_sync(self, container_id: str, command: Sequence[str], timeout: float) -> str:
        self._up()
        owner = next(
            (s for s in self.node.sandboxes.values() if container_id in s.containers), None
        )
        if owner is None:
            raise CriError(f'crictl exec: container "{container_id}" not found')
        if command and "%NUMBER_OF_PROCESSORS%" in command[-1]:
            vm = self.node.systems.get(f"{owner.id}@vm")
            count = vm["_size"].processors if vm else self.node.settings.logical_processors
            return f"{count}\r\n"
        raise CriError(f"crictl exec: the simulated container runs no {list(command)!r}")

    def stop_container(self, container_id: str, timeout: float) -> None:
        self._up()

    def remove_container(self, container_id: str, timeout: float) -> None:
        self._up()
        for sandbox in list(self.node.sandboxes.values()):
            if container_id in sandbox.containers:
                sandbox.containers.discard(container_id)
                self.node.record("container-removed", container_id)
                return
        raise CriError(f'crictl rm: container "{container_id}" not found')


class SimulatedHcs:
    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def enumerate_compute_systems(
        self, query: Mapping[str, Any], timeout: float
    ) -> list[dict[str, Any]]:
        ids, types, owners = (query.get(k) for k in ("Ids", "Types", "Owners"))
        with self.node.lock:
            systems = list(self.node.systems.values())
        return [
            {k: v for k, v in s.items() if not k.startswith("_")}
            for s in systems
            if (ids is None or s["Id"] in ids)
            and (types is None or s["SystemType"] in types)
            and (owners is None or s["Owner"] in owners)
        ]

    def compute_system_properties(
        self, system_id: str, property_types: Sequence[str], timeout: float
    ) -> dict[str, Any]:
        system = self.node.systems.get(system_id)
        if system is None:
            raise HcsError(
                f"HcsOpenComputeSystem {system_id}: A virtual machine or container with the "
                "specified identifier does not exist.",
                HCS_E_SYSTEM_NOT_FOUND,
            )
        document = {k: v for k, v in system.items() if not k.startswith("_")}
        size: VmSize | None = system.get("_size")
        if "Memory" in property_types and size is not None:
            # Physically backed or fully touched: AssignedMemory in 4 KiB pages.
            document["Memory"] = {
                "VirtualNodeCount": 1,
                "VirtualMachineMemory": {"AssignedMemory": size.memory_mb * 256},
            }
        return document

    def service_properties(self, property_types: Sequence[str]) -> dict[str, Any]:
        count = self.node.settings.logical_processors
        return {"Properties": [{"LogicalProcessorCount": count}]}


def _shim_problem(table: Mapping[str, Any]) -> str | None:
    """Why containerd cannot start the handler's shim on a simulated host: it resolves
    runtime_type to a binary beside itself, and stats runtime_path first when it is set."""
    path = table.get("runtime_path")
    if not path:
        if table.get("runtime_type") == RUNHCS:
            return None
        return f'failed to start shim: runtime "{table.get("runtime_type")}" binary not installed'
    if str(path).lower() == SHIM_PATH.lower():
        return None
    return (
        f"failed to start shim: invalid custom binary path: CreateFile {path}: The system "
        "cannot find the path specified."
    )
