"""CRI on a simulated node: the pod sandboxes and containers a canary starts, run with the
handler containerd loaded, refused as the shim and HCS refuse them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING, Any

from wcow_agent.config.containerd_lines import line_for, version_tuple
from wcow_agent.host.interfaces import CommandTimeoutError, CriError, CriStatus, SandboxStatus
from wcow_agent.simulator.hcs import VmSize, vm_size
from wcow_contract.catalog.runhcs_options import LOG_LEVELS, RUNHCS_OPTIONS
from wcow_contract.catalog.windows_builds import (
    hyperv_can_run,
    parse_windows_build,
    process_can_run,
)

if TYPE_CHECKING:
    from wcow_agent.simulator.node import SimulatedNode

SHIM = "containerd-shim-runhcs-v1.exe"
# The only shim binary on a simulated host: beside containerd.exe, as the release ships it.
SHIM_PATH = rf"C:\Program Files\containerd\{SHIM}"
RUNHCS = "io.containerd.runhcs.v1"
IMAGE_MISMATCH = (
    "hcs::CreateComputeSystem: The container operating system does not match the host "
    "operating system."
)
NETWORK_NOT_READY = "NetworkReady: NetworkPluginNotReady cni config uninitialized"
LATE_SANDBOX_SECONDS = 10.0  # how long after a hung start's timeout its sandbox comes up


@dataclass
class Sandbox:
    id: str
    name: str
    namespace: str
    uid: str
    handler: str
    labels: dict[str, str]
    state: str = "SANDBOX_READY"
    containers: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Container id -> the ContainerConfig it was created with."""


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


class SimulatedCri:
    """The CRI runtime service as the canary uses it: every call is one of the node's host
    calls (``node.call``)."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node

    def _up(self, call: str) -> None:
        """One CRI call (named by crictl's verb), which needs containerd up."""
        self.node.call(call)
        if not self.node.running:
            raise CriError(
                "crictl: validate service connection: rpc error: code = Unavailable desc = "
                r"connection error: open \\.\pipe\containerd-containerd: The system cannot "
                "find the file specified."
            )

    def status(self, timeout: float) -> CriStatus:
        self._up("cri status")
        handlers = None
        if version_tuple(self.node.settings.containerd_version)[0] >= 2:
            handlers = tuple(sorted(self.node.loaded_runtimes()))
        ready = self.node.network_ready
        return CriStatus(
            runtime_ready=True,
            network_ready=ready,
            message="" if ready else NETWORK_NOT_READY,
            handlers=handlers,
        )

    def run_pod_sandbox(self, config: Mapping[str, Any], handler: str, timeout: float) -> str:
        node = self.node
        self._up("cri runp")
        metadata = config.get("metadata") or {}
        if not metadata.get("name") or not metadata.get("namespace"):
            raise CriError(
                "crictl runp: load podSandboxConfig: name or namespace is not in metadata"
            )
        if node.faults.runp_hangs:
            node.sleep(timeout + LATE_SANDBOX_SECONDS)
            self._create(config, handler, node.loaded_runtimes().get(handler, {}))
            raise CommandTimeoutError(f"crictl runp did not finish in {timeout:.0f} s (killed)")
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
        return self._create(config, handler, runtimes[handler])

    def _create(self, config: Mapping[str, Any], handler: str, table: Mapping[str, Any]) -> str:
        """The sandbox and its compute system: a utility VM for Hyper-V isolation."""
        node = self.node
        options = honoured_options(table, node.settings.containerd_version)
        metadata = config.get("metadata") or {}
        with node.lock:
            sandbox_id = uuid.uuid4().hex + uuid.uuid4().hex
            node.sandboxes[sandbox_id] = Sandbox(
                sandbox_id,
                str(metadata.get("name", "")),
                str(metadata.get("namespace", "")),
                str(metadata.get("uid", "")),
                handler,
                dict(config.get("labels") or {}),
            )
            system = {
                "Id": sandbox_id,
                "SystemType": "Container",
                "Name": sandbox_id,
                "Owner": "containerd-shim-runhcs-v1.exe",
                "RuntimeOsType": "Windows",
                "State": "Running",
            }
            if options.get("SandboxIsolation") == 1 and not node.faults.ignore_isolation:
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
                    "_size": self._vm_size(options),
                }
            else:
                node.systems[sandbox_id] = system
        return sandbox_id

    def _vm_size(self, options: Mapping[str, Any]) -> VmSize:
        """As hcsshim sizes the VM, unless a fault says what it really gets."""
        faults = self.node.faults
        size = vm_size(options, self.node.settings.logical_processors)
        return VmSize(
            faults.vm_processors or size.processors, faults.vm_memory_mb or size.memory_mb
        )

    def _problem(self, handler: str, runtimes: Mapping[str, Any]) -> str | None:
        node = self.node
        if handler not in runtimes:
            return f'failed to get sandbox runtime: no runtime for "{handler}" is configured'
        table = runtimes[handler]
        problem = _shim_problem(table, node.settings.shim_paths)
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

    def _get(self, sandbox_id: str) -> Sandbox:
        sandbox = self.node.sandboxes.get(sandbox_id)
        if sandbox is None:
            raise CriError(f'crictl: pod sandbox "{sandbox_id}": rpc error: code = NotFound')
        return sandbox

    def pod_sandbox_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        self._up("cri inspectp")
        sandbox = self._get(sandbox_id)
        return SandboxStatus(sandbox.id, sandbox.state, sandbox.handler, dict(sandbox.labels))

    def list_pod_sandboxes(self, labels: Mapping[str, str], timeout: float) -> list[SandboxStatus]:
        self._up("cri pods")
        return [
            SandboxStatus(s.id, s.state, s.handler, dict(s.labels))
            for s in list(self.node.sandboxes.values())
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def stop_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._up("cri stopp")
        self._get(sandbox_id).state = "SANDBOX_NOTREADY"
        with self.node.lock:
            self.node.systems.pop(f"{sandbox_id}@vm", None)
            self.node.systems.pop(sandbox_id, None)

    def remove_pod_sandbox(self, sandbox_id: str, timeout: float) -> None:
        self._up("cri rmp")
        with self.node.lock:
            sandbox = self.node.sandboxes.pop(sandbox_id, None)
            self.node.systems.pop(f"{sandbox_id}@vm", None)
            self.node.systems.pop(sandbox_id, None)
        if sandbox is None:
            raise CriError(f'crictl: pod sandbox "{sandbox_id}": rpc error: code = NotFound')
        self.node.record("sandbox-removed", sandbox.handler)

    def pull_image(self, image: str, timeout: float) -> None:
        self._up("cri pull")
        problem = self._pull_problem(image)
        if problem:
            self.node.record("pull-failed", image)
            raise CriError(f"crictl pull failed: pulling image: {problem}")
        self.node.record("pulled", image)
        self.node.images[image] = self.node.image_build(image)

    def image_os_version(self, image: str, timeout: float) -> str | None:
        self._up("cri inspecti")
        build = self.node.images.get(image)
        return None if build is None else f"{build}.1"

    def create_container(
        self,
        sandbox_id: str,
        container: Mapping[str, Any],
        sandbox: Mapping[str, Any],
        timeout: float,
    ) -> str:
        self._up("cri create")
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
        owner.containers[container_id] = container
        self.node.record("container-created", image)
        return container_id

    def start_container(self, container_id: str, timeout: float) -> None:
        self._up("cri start")

    def exec_sync(self, container_id: str, command: Sequence[str], timeout: float) -> str:
        self._up("cri exec")
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
        self._up("cri stop")

    def remove_container(self, container_id: str, timeout: float) -> None:
        self._up("cri rm")
        for sandbox in list(self.node.sandboxes.values()):
            if container_id in sandbox.containers:
                del sandbox.containers[container_id]
                self.node.record("container-removed", container_id)
                return
        raise CriError(f'crictl rm: container "{container_id}" not found')


def _shim_problem(table: Mapping[str, Any], installed: tuple[str, ...] | None) -> str | None:
    """Why containerd cannot start the handler's shim on a simulated host: it resolves
    runtime_type to a binary beside itself, and stats runtime_path first when it is set.
    ``installed`` None: every shim a handler names is there."""
    if installed is None:
        return None
    path = table.get("runtime_path")
    if not path:
        if table.get("runtime_type") == RUNHCS:
            return None
        return f'failed to start shim: runtime "{table.get("runtime_type")}" binary not installed'
    if str(path).lower() in {shim.lower() for shim in installed}:
        return None
    return (
        f"failed to start shim: invalid custom binary path: CreateFile {path}: The system "
        "cannot find the path specified."
    )
