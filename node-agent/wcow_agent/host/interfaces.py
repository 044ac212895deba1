"""What the agent needs from a Windows node, as small interfaces.

Everything here is implemented twice: for real on Windows (``windows.py``, ``crictl.py``,
``computecore.py``, ``containerd.py``) and as fakes in the tests, which replay the wire
formats the real tools produce (crictl JSON, HCS property documents). The agent's decisions
never look past these interfaces, so they run and are tested on Linux.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wcow_contract.catalog.windows_builds import WindowsBuild


class HostError(RuntimeError):
    """A call into the host failed. The message names the tool, what it was asked to do
    and what it answered."""


class CommandTimeoutError(HostError):
    """A host command did not finish in time (it was killed)."""


class CancelledError(HostError):
    """The agent is stopping; the command was abandoned (and killed)."""


class ContainerdError(HostError):
    pass


class CriError(HostError):
    pass


class HcsError(HostError):
    def __init__(self, message: str, hresult: int | None = None) -> None:
        super().__init__(message)
        self.hresult = hresult


@dataclass(frozen=True)
class CriStatus:
    """``crictl info``: whether containerd answers on its CRI endpoint and is ready."""

    runtime_ready: bool
    network_ready: bool
    message: str = ""
    handlers: tuple[str, ...] | None = None
    """Runtime handlers containerd reports (CRI ``runtimeHandlers``, containerd 2.x);
    None when the runtime does not report them."""


@dataclass(frozen=True)
class SandboxStatus:
    """One pod sandbox as ``crictl inspectp`` / ``crictl pods`` report it."""

    id: str
    state: str  # SANDBOX_READY | SANDBOX_NOTREADY
    runtime_handler: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


class WindowsInfo(Protocol):
    """Facts about the Windows host itself."""

    def windows_build(self) -> WindowsBuild:
        """``10.0.<CurrentBuildNumber>`` from the registry, as the kubelet reports it."""
        ...

    def hyperv_available(self) -> bool:
        """Whether HCS can run utility VMs here (hypervisor running, Containers feature)."""
        ...


class Containerd(Protocol):
    def version(self) -> str:
        """containerd's version, e.g. ``1.7.20`` or ``2.0.0``."""
        ...

    def config_default(self) -> str:
        """``containerd config default``: the text to seed a missing config.toml with."""
        ...

    def config_dump(self, config: Path) -> str:
        """``containerd --config FILE config dump``: the effective configuration that
        containerd would run with this file; raises ContainerdError if it cannot load it."""
        ...

    def restart(self, timeout: float) -> None:
        """Restart the containerd service (and restart what depends on it that was running)."""
        ...


class Cri(Protocol):
    """The CRI runtime service of containerd (through crictl on Windows)."""

    def status(self, timeout: float) -> CriStatus: ...

    def run_pod_sandbox(self, config: Mapping[str, Any], handler: str, timeout: float) -> str:
        """Start a pod sandbox with this runtime handler; returns its id."""
        ...

    def pod_sandbox_status(self, sandbox_id: str, timeout: float) -> SandboxStatus: ...

    def list_pod_sandboxes(
        self, labels: Mapping[str, str], timeout: float
    ) -> list[SandboxStatus]: ...

    def stop_pod_sandbox(self, sandbox_id: str, timeout: float) -> None: ...

    def remove_pod_sandbox(self, sandbox_id: str, timeout: float) -> None: ...

    def pull_image(self, image: str, timeout: float) -> None:
        """CRI ``PullImage``, as the kubelet asks for a pod's image (containerd chooses the
        manifest of an index for the host's build: docs/images.md, section 1)."""
        ...

    def image_os_version(self, image: str, timeout: float) -> str | None:
        """The ``os.version`` of the image containerd holds under this reference (CRI
        ``ImageStatus``, verbose: the image config containerd reports), "" when its config
        has none; None when containerd holds no such image."""
        ...

    def create_container(
        self,
        sandbox_id: str,
        container: Mapping[str, Any],
        sandbox: Mapping[str, Any],
        timeout: float,
    ) -> str: ...

    def start_container(self, container_id: str, timeout: float) -> None: ...

    def exec_sync(self, container_id: str, command: Sequence[str], timeout: float) -> str:
        """Run a command in a container and return its standard output."""
        ...

    def stop_container(self, container_id: str, timeout: float) -> None: ...

    def remove_container(self, container_id: str, timeout: float) -> None: ...


class Hcs(Protocol):
    """The Host Compute Service (computecore.dll), JSON documents in and out."""

    def enumerate_compute_systems(
        self, query: Mapping[str, Any], timeout: float
    ) -> list[dict[str, Any]]:
        """Compute systems matching a SystemQuery (``Ids``, ``Types``, ``Owners``...)."""
        ...

    def compute_system_properties(
        self, system_id: str, property_types: Sequence[str], timeout: float
    ) -> dict[str, Any]:
        """Open the system, query these property types, close it again."""
        ...

    def service_properties(self, property_types: Sequence[str]) -> dict[str, Any]:
        """``HcsGetServiceProperties`` (e.g. ``ProcessorTopology``)."""
        ...


class NodeInventory(Protocol):
    """What the agent reads of a Windows node to tell where its containerd keeps its
    configuration and which distribution set it up (``layouts/discovery.py``): the services'
    registered command lines and whether paths exist. Real on Windows
    (``node_inventory.py``: the registry under
    ``HKLM\\SYSTEM\\CurrentControlSet\\Services``); a dictionary in the tests."""

    def service_command_line(self, name: str) -> str | None:
        """The service's ``ImagePath`` (what ``Win32_Service.PathName`` reports), with its
        environment variables expanded; None: there is no such service."""
        ...

    def service_parameter(self, name: str, value: str) -> str | None:
        """A value under the service's ``Parameters`` key (nssm keeps the program it runs in
        ``Application`` and its arguments in ``AppParameters``); None: not set."""
        ...

    def exists(self, path: str) -> bool:
        """Whether a file or folder exists on the host."""
        ...


class FileSecurity(Protocol):
    """Who may use a file: copied onto the file that replaces it (``filesecurity.py``)."""

    def copy(self, source: Path, target: Path) -> None:
        """Give ``target`` the access control of ``source`` (POSIX: mode and owner;
        Windows: owner, group and DACL). Raises OSError when it cannot."""
        ...


@dataclass(frozen=True)
class Host:
    """Everything Windows-specific the agent uses, bundled."""

    windows: WindowsInfo
    containerd: Containerd
    cri: Cri
    hcs: Hcs
    inventory: NodeInventory | None = None
    """What ``--distribution auto`` reads on the node (None: nothing to read, as with the
    simulator and the tests' hosts: the flags and containerd's own layout hold)."""
