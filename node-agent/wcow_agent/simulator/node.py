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
benchmark can tell from the nodes themselves when each one applied; every call it makes is
counted (``call``), so a test can kill the agent at any one of them.

This is also the Windows-host double of the agent's tests (``tests/agent/fakes.py`` adds
crictl's and computecore.dll's wire formats in front of its CRI and HCS, and a fake clock).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_agent.config.containerd_lines import line_for
from wcow_agent.config.node_paths import NodePaths, SamePaths
from wcow_agent.host.interfaces import CancelledError, CommandTimeoutError, Host
from wcow_agent.simulator.containerd import (
    SimulatedContainerd,
    default_config,
    effective_pause_image,
    effective_runtimes,
    load_problem,
)
from wcow_agent.simulator.cri import SHIM_PATH, Sandbox, SimulatedCri
from wcow_agent.simulator.faults import Faults, SimulatedCrash
from wcow_agent.simulator.hcs import SimulatedHcs
from wcow_contract.catalog.windows_builds import BUILD_ALIASES, WindowsBuild, parse_windows_build


@dataclass(frozen=True)
class JournalEntry:
    time: float  # time.time()
    node: str
    event: str
    detail: str = ""


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
    config_default: str | None = None
    """What ``containerd config default`` prints (None: the simulator's rendering of it)."""
    seed_config: bool = True
    """A missing config.toml is written from ``config default``, as a node's installer does
    (False: the node has none, and containerd runs on its built-in defaults)."""
    shim_paths: tuple[str, ...] | None = (SHIM_PATH,)
    """The shim binaries on the node (None: whatever shim a handler names is there)."""

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
    does (``HostSettings.seed_config``). containerd starts running that file."""

    def __init__(
        self,
        name: str,
        root: Path,
        settings: HostSettings | None = None,
        faults: Faults | None = None,
        *,
        journal: Callable[[JournalEntry], None] | None = None,
        cancel: threading.Event | None = None,
        sleep: Callable[[float], bool] | None = None,
        paths: NodePaths | None = None,
    ) -> None:
        """``sleep``: how time passes on this host (slow canaries, a hanging sandbox start);
        True when the agent is stopping. Default: a wait on ``cancel``. ``paths``: how the
        paths in containerd's configuration (imports) are found on this host's disk."""
        self.name = name
        self.paths: NodePaths = paths or SamePaths()
        self.root = root
        self.settings = settings or HostSettings()
        self.faults = faults or Faults()
        self.cancel = cancel or threading.Event()
        self.sleep = sleep or self.cancel.wait
        self._journal_sink = journal
        self.journal: list[JournalEntry] = []
        self.calls: list[str] = []
        """Every host call the agent made, in order (``call``)."""
        self.crashed = False
        """The agent died at a call (``Faults.crash_at_call``); a new agent resets it."""
        self.lock = threading.RLock()
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "config.toml"
        if self.settings.seed_config and not self.config.exists():
            self.config.write_text(self.default_config_text(), "utf-8")
        self.seeded_text = self.disk_text()
        self.running_text: str | None = self.seeded_text
        self.running_imports: tuple[str, ...] = ()
        """The imported files containerd loaded with ``running_text``, in its order."""
        self.running = load_problem(self.seeded_text, self.settings.containerd_version) is None
        """containerd runs and answers on CRI."""
        self.network_ready = True
        """CRI reports the pod network ready (a CNI configured)."""
        self.restarted_with: list[str | None] = []
        """config.toml as it was at each containerd restart."""
        self.sandboxes: dict[str, Sandbox] = {}
        self.systems: dict[str, dict[str, Any]] = {}
        self.images: dict[str, str] = {}  # reference pulled -> its build
        self.image_builds: dict[str, str] = dict(self.settings.image_builds)
        """What a pull of each reference gets (a build, or an image's os.version)."""
        self._ids = itertools.count(1)

    @property
    def restarts(self) -> int:
        return len(self.restarted_with)

    def call(self, name: str) -> None:
        """One host call of the agent: counted, and where it dies under the crash fault
        (after which every call dies, as the agent process is gone)."""
        with self.lock:
            if self.crashed:
                raise SimulatedCrash(f"dead agent called {name}")
            self.calls.append(name)
            if self.faults.crash_at_call == len(self.calls):
                self.crashed = True
                raise SimulatedCrash(name)

    def record(self, event: str, detail: str = "") -> None:
        entry = JournalEntry(time.time(), self.name, event, detail)
        with self.lock:
            self.journal.append(entry)
        if self._journal_sink is not None:
            self._journal_sink(entry)

    def default_config_text(self) -> str:
        """What ``containerd config default`` prints on this node."""
        if self.settings.config_default is not None:
            return self.settings.config_default
        return default_config(self.settings.containerd_version)

    def image_build(self, image: str) -> str:
        """The build of what a CRI pull of ``image`` gets on this host."""
        given = self.image_builds.get(image)
        if given is not None:  # a pause image set by --pause-image too
            return parse_windows_build(".".join(given.split(".")[:3])).label_value
        if image == self.pause_image():
            return self.settings.pause_build or self.settings.build
        tag = image.rsplit("/", 1)[-1].partition("@")[0].rpartition(":")[2]
        # MCR tags name their build; an index of several builds gives the host's entry.
        number = BUILD_ALIASES.get(tag)
        build = WindowsBuild(number) if number else parse_windows_build(self.settings.build)
        return build.label_value

    def pause_image(self) -> str:
        """The pause image of the configuration containerd runs."""
        return effective_pause_image(
            self.running_text or self.seeded_text,
            self.settings.containerd_version,
            self.running_imports,
        )

    def loaded_runtimes(self) -> dict[str, Any]:
        version = self.settings.containerd_version
        return effective_runtimes(self.running_text, version, self.running_imports)[0]

    def before_start(self) -> None:
        """What the node does to containerd's configuration before containerd starts (a
        distribution rendering config.toml from its template); nothing here."""

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
        if self.sleep(min(seconds, timeout)):
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
