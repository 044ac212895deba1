"""Prove a runtime handler works: start a pod sandbox with it through CRI, ask HCS what
was really created, tear it down whatever happened.

What a pass means:
- containerd accepted the handler and started a sandbox (``crictl runp --runtime H``);
- HCS has the compute system the isolation implies: for Hyper-V a ``VirtualMachine``
  named ``<sandbox-id>@vm`` owned by the shim (hcsshim's Owner is the base name of its own
  executable: ``containerd-shim-runhcs-v1.exe``, or the file ``runtime_path`` names); for process
  isolation a ``Container`` with the sandbox's id and no utility VM;
- the VM's size where it can be observed: HCS does not report the configured vCPU count
  or memory size, so the processor count is read inside the VM from a canary container
  (``%NUMBER_OF_PROCESSORS%``, when the profile names a canary image), and memory from the
  HCS ``Memory`` property, which is exact only for physically backed VMs (hcsshim reads
  ``AssignedMemory`` as 4 KiB pages; a VA-backed VM reports what it has touched, so there
  only "more than requested" is a mismatch).

Every canary sandbox carries the label ``runtime.wcow.dev/canary=true``; ``sweep()``
removes any left behind by an agent that was killed mid-canary.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PureWindowsPath
from typing import Any

from wcow_agent.host.interfaces import (
    CancelledError,
    CommandTimeoutError,
    Cri,
    CriError,
    Hcs,
    HcsError,
    HostError,
)
from wcow_contract.wire.plan import PlanEntry

CANARY_NAMESPACE = "wcow-canary"
CANARY_LABEL = "runtime.wcow.dev/canary"
HANDLER_LABEL = "runtime.wcow.dev/canary-handler"
RUN_LABEL = "runtime.wcow.dev/canary-run"
SHIM_OWNER = "containerd-shim-runhcs-v1.exe"
CLEANUP_TIMEOUT = 60.0
PAGE_BYTES = 4096
PROCESSOR_COMMAND = ("cmd", "/S", "/C", "echo %NUMBER_OF_PROCESSORS%")
# Keeps the probe container alive for exec; ping exists in nanoserver and servercore.
KEEPALIVE_COMMAND = ("cmd", "/S", "/C", "ping -n 3600 127.0.0.1 >NUL")


@dataclass(frozen=True)
class CanarySpec:
    handler: str
    isolation: str  # "HyperV" | "Process"
    timeout_seconds: float
    image: str | None = None
    processor_count: int | None = None
    memory_mb: int | None = None
    fully_physically_backed: bool = False
    shim_owner: str = SHIM_OWNER
    """The Owner HCS reports for the shim's compute systems: hcsshim uses the base name of
    its own executable (``filepath.Base(os.Args[0])``), and containerd starts
    ``runtime_path`` as that executable when the handler names one."""

    @classmethod
    def from_plan(
        cls, handler: str, entry: PlanEntry, default_image: str | None = None
    ) -> CanarySpec:
        """``default_image``: the agent's image for the entry's build (``--canary-image``),
        used when the profile names none."""
        vm = entry.vm
        return cls(
            handler=handler,
            isolation=entry.isolation,
            timeout_seconds=float(entry.canary.timeout_seconds or 180),
            image=entry.canary.image or default_image or None,
            processor_count=vm.processor_count if vm is not None else None,
            memory_mb=vm.memory_mb if vm is not None else None,
            fully_physically_backed=vm is not None and vm.fully_physically_backed,
            shim_owner=shim_owner(entry.runtime.get("runtime_path")),
        )


def shim_owner(runtime_path: str | None) -> str:
    """The compute-system Owner a handler's shim reports (base name of its binary)."""
    if not runtime_path:
        return SHIM_OWNER
    return PureWindowsPath(runtime_path).name or SHIM_OWNER


@dataclass(frozen=True)
class CanaryResult:
    handler: str
    passed: bool
    reason: str
    message: str
    duration_seconds: float
    sandbox_id: str | None = None
    observed: Mapping[str, Any] = field(default_factory=dict)
    cleanup_error: str | None = None


class _Deadline(Exception):  # noqa: N818 - internal control flow
    pass


Failure = tuple[str, str]  # (reason, message)


def check_isolation(
    spec: CanarySpec, sandbox_id: str, systems: list[dict[str, Any]]
) -> Failure | None:
    """Whether HCS shows the isolation the handler promises (pure: takes the documents
    ``HcsEnumerateComputeSystems`` returned for ``{"Ids": [id, id@vm]}``)."""
    by_id = {str(s.get("Id")): s for s in systems}
    vm = by_id.get(f"{sandbox_id}@vm")
    if spec.isolation == "HyperV":
        return _check_vm(sandbox_id, vm, spec.shim_owner)
    if vm is not None:
        return (
            "IsolationMismatch",
            f"HCS has a utility VM {sandbox_id}@vm for a process-isolated handler "
            "(the handler's SandboxIsolation must be 0)",
        )
    container = by_id.get(sandbox_id)
    if container is None or container.get("SystemType") != "Container":
        return (
            "IsolationMismatch",
            f"HCS has no process-isolated container {sandbox_id} for the sandbox",
        )
    return None


def _check_vm(sandbox_id: str, vm: Mapping[str, Any] | None, owner: str) -> Failure | None:
    name = f"{sandbox_id}@vm"
    if vm is None:
        return (
            "IsolationMismatch",
            f"HCS has no utility VM {name}: the sandbox is not Hyper-V isolated "
            "(the handler's SandboxIsolation must be 1)",
        )
    problem = None
    if vm.get("SystemType") != "VirtualMachine":
        problem = f"{name} is a {vm.get('SystemType')}, not a VirtualMachine"
    elif str(vm.get("Owner", "")).casefold() != owner.casefold():  # Windows names ignore case
        problem = f"{name} is owned by {vm.get('Owner')!r}, not {owner}"
    if problem:
        return ("IsolationMismatch", problem)
    if vm.get("State") not in (None, "Running"):
        return ("VmNotRunning", f"{name} is {vm.get('State')}, not Running")
    return None


def expected_memory_mb(requested: int) -> int:
    """hcsshim rounds utility VM memory up to an even number of MB."""
    return (requested + 1) & ~1


def check_memory(
    spec: CanarySpec, properties: Mapping[str, Any]
) -> tuple[Failure | None, float | None]:
    """(failure, observed MB) from an HCS ``Memory`` properties document."""
    memory = (properties.get("Memory") or {}).get("VirtualMachineMemory") or {}
    pages = memory.get("AssignedMemory")
    if spec.memory_mb is None or not isinstance(pages, int) or pages <= 0:
        return None, None
    observed = pages * PAGE_BYTES / (1024 * 1024)
    expected = expected_memory_mb(spec.memory_mb)
    slack = max(2.0, expected * 0.01)
    if observed > expected + slack:
        return (
            "VmSizeMismatch",
            f"the utility VM has {observed:.0f} MB assigned, more than the {expected} MB the "
            "handler asks for: VmMemorySizeInMb was not applied",
        ), observed
    if spec.fully_physically_backed and observed < expected - slack:
        return (
            "VmSizeMismatch",
            f"the physically backed utility VM has {observed:.0f} MB, not {expected} MB",
        ), observed
    return None, observed


def check_processors(
    spec: CanarySpec, output: str, host_processors: int | None
) -> tuple[Failure | None, int | None]:
    """(failure, observed count) from ``%NUMBER_OF_PROCESSORS%`` inside the VM. hcsshim
    caps the count at the host's logical processors."""
    match = re.search(r"\d+", output)
    if match is None:
        return ("CanaryImageFailed", f"no processor count in the probe's output {output!r}"), None
    observed = int(match.group())
    if spec.processor_count is None:
        return None, observed
    expected = spec.processor_count
    if host_processors:
        expected = min(expected, host_processors)
    if observed != expected:
        return (
            "VmSizeMismatch",
            f"the utility VM has {observed} processors, the handler asks for {expected}",
        ), observed
    return None, observed


def pod_config(spec: CanarySpec, run_id: str, log_root: str) -> dict[str, Any]:
    """A CRI PodSandboxConfig (crictl's JSON input: snake_case field names)."""
    return {
        "metadata": {
            "name": f"wcow-canary-{spec.handler}",
            "namespace": CANARY_NAMESPACE,
            "uid": run_id,
            "attempt": 0,
        },
        "hostname": "wcow-canary",
        "log_directory": str(PureWindowsPath(log_root) / "canary" / run_id),
        "labels": {CANARY_LABEL: "true", HANDLER_LABEL: spec.handler, RUN_LABEL: run_id},
        "annotations": {},
    }


# The probe reads two environment values; it needs no rights. The image comes from the plan,
# and the container is started through CRI, where no admission policy sees it: run it as the
# unprivileged account every Windows base image has, never as the image's default user
# (often ContainerAdministrator), and with no mounts and no HostProcess.
PROBE_USER = "ContainerUser"


def probe_container_config(image: str, run_id: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "probe", "attempt": 0},
        "image": {"image": image},
        "command": list(KEEPALIVE_COMMAND),
        "log_path": "probe.log",
        "labels": {CANARY_LABEL: "true", RUN_LABEL: run_id},
        "windows": {"security_context": {"run_as_username": PROBE_USER}},
    }


class Canary:
    def __init__(
        self,
        cri: Cri,
        hcs: Hcs,
        log_root: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cri = cri
        self.hcs = hcs
        self.log_root = log_root
        self.clock = clock
        self._host_processors: int | None = None

    def host_processors(self) -> int | None:
        if self._host_processors is None:
            try:
                topology = self.hcs.service_properties(["ProcessorTopology"])
            except HcsError:
                return None
            for item in topology.get("Properties") or []:
                if isinstance(item, dict) and isinstance(item.get("LogicalProcessorCount"), int):
                    self._host_processors = item["LogicalProcessorCount"]
        return self._host_processors

    def run(self, spec: CanarySpec, cancel: threading.Event | None = None) -> CanaryResult:
        start = self.clock()
        deadline = start + spec.timeout_seconds
        run_id = uuid.uuid4().hex
        observed: dict[str, Any] = {}
        sandbox: list[str] = []

        def remaining() -> float:
            if cancel is not None and cancel.is_set():
                raise CancelledError("the agent is stopping")
            left = deadline - self.clock()
            if left <= 0:
                raise _Deadline
            return left

        failure: Failure | None
        observed["_containers"] = []
        try:
            failure = self._probe(spec, run_id, remaining, sandbox, observed)
        except (_Deadline, HostError) as error:
            failure = _failure(spec, error)
        finally:
            containers = observed.pop("_containers")
            cleanup_error = self.cleanup(run_id, sandbox[0] if sandbox else None, containers)
        ran = observed.pop("_image", None)
        return _result(
            spec,
            failure,
            self.clock() - start,
            sandbox_id=sandbox[0] if sandbox else None,
            observed=observed,
            cleanup_error=cleanup_error,
            image=ran,
        )

    def _probe(
        self,
        spec: CanarySpec,
        run_id: str,
        remaining: Callable[[], float],
        sandbox: list[str],
        observed: dict[str, Any],
    ) -> Failure | None:
        config = pod_config(spec, run_id, self.log_root)
        sandbox_id = self.cri.run_pod_sandbox(config, spec.handler, remaining())
        sandbox.append(sandbox_id)
        status = self.cri.pod_sandbox_status(sandbox_id, remaining())
        if status.state != "SANDBOX_READY":
            return ("SandboxNotReady", f"sandbox {sandbox_id} is {status.state or 'unknown'}")
        if status.runtime_handler and status.runtime_handler != spec.handler:
            return (
                "WrongRuntimeHandler",
                f"sandbox {sandbox_id} runs with handler {status.runtime_handler!r}",
            )
        systems = self.hcs.enumerate_compute_systems(
            {"Ids": [sandbox_id, f"{sandbox_id}@vm"]}, remaining()
        )
        failure = check_isolation(spec, sandbox_id, systems)
        if failure is None and spec.isolation == "HyperV":
            properties = self.hcs.compute_system_properties(
                f"{sandbox_id}@vm", ["Memory"], remaining()
            )
            failure, memory = check_memory(spec, properties)
            if memory is not None:
                observed["memoryMB"] = math.floor(memory)
        if failure or spec.image is None:
            return failure
        return self._image_probe(spec, (sandbox_id, config), run_id, remaining, observed)

    def _image_probe(
        self,
        spec: CanarySpec,
        sandbox: tuple[str, Mapping[str, Any]],
        run_id: str,
        remaining: Callable[[], float],
        observed: dict[str, Any],
    ) -> Failure | None:
        """The pod path: pull the image through CRI as the kubelet does, start a container
        from it in the canary's sandbox (so under the handler, in its utility VM), and see
        it run a command. The container is removed by ``cleanup``."""
        image = str(spec.image)
        sandbox_id, config = sandbox
        try:
            self.cri.pull_image(image, remaining())
        except CriError as error:
            return ("CanaryImagePullFailed", f"pulling {image} through CRI failed: {error}")
        try:
            container = self.cri.create_container(
                sandbox_id, probe_container_config(image, run_id), config, remaining()
            )
            observed["_containers"].append(container)
            self.cri.start_container(container, remaining())
            output = self.cri.exec_sync(container, PROCESSOR_COMMAND, remaining())
        except CriError as error:
            return (
                "CanaryImageFailed",
                f"{image} was pulled but did not run under handler {spec.handler}: {error}",
            )
        if spec.isolation != "HyperV":
            if re.search(r"\d+", output) is None:
                return ("CanaryImageFailed", f"{image} ran but printed {output!r:.200}")
            observed["_image"] = image
            return None
        failure, processors = check_processors(spec, output, self.host_processors())
        if processors is not None:
            observed["processors"] = processors
        if failure is None:
            observed["_image"] = image
        return failure

    def cleanup(
        self, run_id: str | None, sandbox_id: str | None, containers: Sequence[str] = ()
    ) -> str | None:
        """Stop and remove the canary's container and sandbox (and any sandbox of the same
        run a timed-out ``runp`` created after all). Never raises; returns what failed."""
        errors = []
        for container in containers:
            for step in (self.cri.stop_container, self.cri.remove_container):
                try:
                    step(container, CLEANUP_TIMEOUT)
                except HostError as error:
                    errors.append(str(error))
        ids = [sandbox_id] if sandbox_id else []
        if run_id is not None:
            try:
                ids += [
                    s.id
                    for s in self.cri.list_pod_sandboxes({RUN_LABEL: run_id}, CLEANUP_TIMEOUT)
                    if s.id not in ids
                ]
            except HostError as error:
                errors.append(str(error))
        for found in ids:
            errors += self._remove(found)
        return "; ".join(errors) or None

    def sweep(self) -> tuple[list[str], str | None]:
        """Remove every canary sandbox on the node (left by a killed agent)."""
        try:
            leftovers = self.cri.list_pod_sandboxes({CANARY_LABEL: "true"}, CLEANUP_TIMEOUT)
        except HostError as error:
            return [], str(error)
        errors = []
        for sandbox in leftovers:
            errors += self._remove(sandbox.id)
        return [s.id for s in leftovers], "; ".join(errors) or None

    def _remove(self, sandbox_id: str) -> list[str]:
        errors = []
        for step in (self.cri.stop_pod_sandbox, self.cri.remove_pod_sandbox):
            try:
                step(sandbox_id, CLEANUP_TIMEOUT)
            except HostError as error:
                errors.append(str(error))
        return errors


def _cri_failure(handler: str, error: str) -> Failure:
    if "no runtime for" in error:
        return (
            "RuntimeNotLoaded",
            f"containerd does not know handler {handler!r}: it has not loaded the current "
            f"config.toml ({error})",
        )
    return ("SandboxFailed", error)


def _failure(spec: CanarySpec, error: Exception) -> Failure:
    """What stopped a probe, as the canary's failure."""
    if isinstance(error, _Deadline | CommandTimeoutError):
        return (
            "CanaryTimeout",
            f"the canary did not finish in {spec.timeout_seconds:.0f} s "
            "(raise spec.canary.timeoutSeconds if the sandbox image is large)",
        )
    if isinstance(error, CancelledError):
        return ("CanaryCancelled", "the agent stopped during the canary")
    if isinstance(error, CriError):
        return _cri_failure(spec.handler, str(error))
    if isinstance(error, HcsError):
        return ("HcsQueryFailed", str(error))
    return ("CanaryFailed", str(error))


def _result(
    spec: CanarySpec,
    failure: Failure | None,
    duration: float,
    *,
    sandbox_id: str | None,
    observed: dict[str, Any],
    cleanup_error: str | None,
    image: str | None = None,
) -> CanaryResult:
    cleanup = f"; cleanup failed: {cleanup_error}" if cleanup_error else ""
    if failure is None:
        sizes = ", ".join(f"{k} {v}" for k, v in sorted(observed.items()))
        message = f"sandbox started with {spec.isolation} isolation" + (
            f" ({sizes})" if sizes else ""
        )
        if image:
            message += f"; {image} pulled through CRI and ran under it"
        passed, reason = True, "CanaryPassed"
    else:
        passed, (reason, message) = False, failure
    return CanaryResult(
        spec.handler,
        passed,
        reason,
        message + cleanup,
        duration,
        sandbox_id,
        observed,
        cleanup_error,
    )
