"""The real Windows host: registry, Hyper-V availability, the containerd service.

Imports on any platform (``winreg`` is loaded lazily) but only works on Windows; the agent
builds it through ``windows_host()``, which refuses elsewhere. Not executed in this
project's CI (Linux): see docs/agent.md for what is inferred from the references.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from wcow_agent.host.computecore import load_computecore
from wcow_agent.host.containerd import ContainerdCli
from wcow_agent.host.crictl import WINDOWS_ENDPOINT, CrictlCri
from wcow_agent.host.interfaces import ContainerdError, Host, HostError, NodeInventory
from wcow_agent.host.process import Runner, SubprocessRunner, on_windows
from wcow_contract.catalog.windows_builds import WindowsBuild, parse_windows_build

CURRENT_VERSION_KEY = r"SOFTWARE\Microsoft\Windows NT\CurrentVersion"
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_POWERSHELL_TIMEOUT = 60.0


def program_files() -> str:
    return os.environ.get("PROGRAMFILES", r"C:\Program Files")


def program_data() -> str:
    return os.environ.get("PROGRAMDATA", r"C:\ProgramData")


def default_config_path() -> str:
    return program_files() + r"\containerd\config.toml"


def default_containerd_binary() -> str:
    return program_files() + r"\containerd\containerd.exe"


def default_work_dir() -> str:
    return program_data() + r"\wcow-agent"


def build_from_registry(major: int, minor: int, build: str) -> WindowsBuild:
    """The kubelet's ``node.kubernetes.io/windows-build``: Major.Minor.Build, no UBR."""
    return parse_windows_build(f"{major}.{minor}.{int(build)}")


class WindowsRegistryInfo:
    def __init__(self, runner: Runner, hyperv: Literal["auto", "yes", "no"] = "auto") -> None:
        self.runner = runner
        self.hyperv = hyperv

    def windows_build(self) -> WindowsBuild:
        winreg = importlib.import_module("winreg")
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, CURRENT_VERSION_KEY) as key:
            major, _ = winreg.QueryValueEx(key, "CurrentMajorVersionNumber")
            minor, _ = winreg.QueryValueEx(key, "CurrentMinorVersionNumber")
            build, _ = winreg.QueryValueEx(key, "CurrentBuildNumber")
        return build_from_registry(int(major), int(minor), str(build))

    def hyperv_available(self) -> bool:
        """The hypervisor is running and the HCS service (vmcompute) exists.

        Win32_ComputerSystem.HypervisorPresent is false on VMs without nested
        virtualization, where HCS cannot start utility VMs (sig-windows-tools #296)."""
        if self.hyperv != "auto":
            return self.hyperv == "yes"
        script = (
            "$ErrorActionPreference='Stop';"
            "@{hypervisor=[bool](Get-CimInstance -ClassName Win32_ComputerSystem)"
            ".HypervisorPresent;"
            "vmcompute=[bool](Get-Service -Name vmcompute -ErrorAction SilentlyContinue)}"
            "|ConvertTo-Json -Compress"
        )
        result = self.runner(_powershell(script), timeout=_POWERSHELL_TIMEOUT)
        if result.returncode != 0:
            raise HostError(f"cannot tell whether Hyper-V is available: {result.stderr.strip()}")
        facts = json.loads(result.stdout)
        return bool(facts.get("hypervisor")) and bool(facts.get("vmcompute"))


def _powershell(script: str) -> list[str]:
    return ["powershell.exe", "-NoLogo", "-NoProfile", "-NonInteractive", "-Command", script]


class WindowsService:
    """Restart a Windows service, then start again the dependents that were running.

    ``Restart-Service -Force`` stops services that depend on containerd (a kubelet
    registered with a dependency, for example) and does not start them again; leaving the
    kubelet stopped would take the node out of the cluster."""

    def __init__(self, name: str, runner: Runner) -> None:
        if not _SERVICE_NAME.match(name):
            raise ValueError(f"{name!r} is not a Windows service name")
        self.name = name
        self.runner = runner

    def restart(self, timeout: float) -> None:
        script = (
            "$ErrorActionPreference='Stop';"
            f"$s=Get-Service -Name '{self.name}';"
            "$d=@($s.DependentServices|Where-Object {$_.Status -eq 'Running'});"
            f"Restart-Service -Name '{self.name}' -Force;"
            "foreach($x in $d){Start-Service -Name $x.Name}"
        )
        try:
            result = self.runner(_powershell(script), timeout=timeout)
        except HostError as error:
            raise ContainerdError(f"restarting service {self.name}: {error}") from None
        if result.returncode != 0:
            raise ContainerdError(
                f"Restart-Service {self.name} failed: {' '.join(result.stderr.split())[:500]}"
            )


class NoRestart:
    """``--restart-mode none``: the node's owner restarts containerd, the agent never does
    (it writes, reports that a restart is required and waits: the cycle's part)."""

    def restart(self, timeout: float) -> None:
        del timeout


@dataclass(frozen=True)
class WindowsHostOptions:
    containerd_binary: str
    crictl: str
    cri_endpoint: str = WINDOWS_ENDPOINT
    service_name: str = "containerd"
    """The service restarted for a new configuration: containerd's own, or the one that
    owns containerd (``rke2``: its restart also restarts the kubelet and renders
    config.toml again from its template; docs/distributions.md)."""
    work_dir: str = ""
    hyperv: Literal["auto", "yes", "no"] = "auto"
    restart_mode: Literal["service", "none"] = "service"


def windows_host(
    options: WindowsHostOptions,
    cancel: threading.Event | None = None,
    inventory: NodeInventory | None = None,
) -> Host:
    """The real host. Raises HostError off Windows: nothing here may run on Linux."""
    if not on_windows():
        raise HostError(
            "wcow-agent talks to containerd, CRI and HCS of a Windows node; this is "
            f"{platform.system()}. Use `wcow-agent merge` for offline merges."
        )
    runner = SubprocessRunner()
    work_dir = Path(options.work_dir or default_work_dir())
    work_dir.mkdir(parents=True, exist_ok=True)
    service = (
        NoRestart()
        if options.restart_mode == "none"
        else WindowsService(options.service_name, runner)
    )
    return Host(
        windows=WindowsRegistryInfo(runner, options.hyperv),
        containerd=ContainerdCli(options.containerd_binary, runner, service),
        cri=CrictlCri(
            SubprocessRunner(cancel),
            options.crictl,
            options.cri_endpoint,
            work_dir,
            steady_runner=runner,
        ),
        hcs=load_computecore(),
        inventory=inventory,
    )
