"""A Windows node on Linux: containerd, crictl, computecore.dll and the API server, faked.

The fakes sit at the agent's own boundaries and speak the real wire formats:
- ``FakeCrictl`` is a command runner that behaves like the ``crictl`` binary: it parses
  the agent's command line, reads the JSON request files it was given and prints what
  crictl prints (templates in ``wire/``), so the agent's real ``CrictlCri`` is tested;
- ``FakeComputeCore`` exports ctypes callbacks with computecore.dll's signatures, so the
  agent's real ``ComputeCore`` makes real ctypes calls, writes real out-pointers, and must
  free every result document with ``LocalFree``;
- ``FakeContainerd`` loads config.toml like containerd does (1.x drops its built-in
  runtimes when the file defines any) and can refuse to come up with a file.
Every call is recorded, so tests check the agent's requests, not only its results.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import queue
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

import tomli_w

from wcow_agent.attempt import Timeouts
from wcow_agent.cluster import ClusterError, NodeObject, PlanObject, RolloutObject
from wcow_agent.cycle import NodeAgent
from wcow_agent.host.computecore import (
    COMPUTECORE_SIGNATURES,
    HCS_E_SYSTEM_NOT_FOUND,
    KERNEL32_SIGNATURES,
    ComputeCore,
)
from wcow_agent.host.crictl import CrictlCri
from wcow_agent.host.interfaces import CommandTimeoutError, ContainerdError, Host
from wcow_agent.host.process import Completed
from wcow_agent.simulate.host import effective_runtimes
from wcow_agent.state import Paths
from wcow_contract.catalog.windows_builds import WindowsBuild
from wcow_contract.wire.canonical import dump_json
from wcow_contract.wire.plan import Plan, dump_plan
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

WIRE = Path(__file__).resolve().parent / "wire"
CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
SHIM = "containerd-shim-runhcs-v1.exe"
E_FAIL = ctypes.c_int32(0x80004005).value


class SimulatedCrash(BaseException):
    """The agent process dies here: raised from inside a host call (not an Exception, so
    the agent's error handling does not catch it). After it, every host call dies too."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def wire(name: str, **values: str) -> Any:
    text = (WIRE / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return json.loads(text)


@dataclass
class Sandbox:
    id: str
    name: str
    namespace: str
    uid: str
    handler: str
    labels: dict[str, str]
    state: str = "SANDBOX_READY"
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)


class FakeNode:
    """One Windows node: the disk around config.toml, the containerd service, CRI, HCS."""

    def __init__(
        self,
        root: Path,
        *,
        build: int = 20348,
        hyperv: bool = True,
        containerd_version: str = "1.7.20",
        logical_processors: int = 8,
        config_text: str | None = None,
    ) -> None:
        self.root = root
        self.config = root / "config.toml"
        if config_text is not None:
            self.config.write_text(config_text, encoding="utf-8")
        self.clock = FakeClock()
        self.build = build
        self.hyperv = hyperv
        self.containerd_version = containerd_version
        self.logical_processors = logical_processors
        self.running_text: str | None = config_text
        self.cri_up = True
        self.network_ready = True
        self.refuse: Callable[[str | None], str | None] = lambda _text: None
        self.refuse_mode = "start"  # "start": the service fails; "cri": CRI never answers
        self.restarts: list[str | None] = []
        self.ops: list[str] = []
        self.crash_at: int | None = None
        self.crashed = False
        self.sandboxes: dict[str, Sandbox] = {}
        self.systems: dict[str, dict[str, Any]] = {}
        self.crictl_calls: list[list[str]] = []
        self.crictl_inputs: list[tuple[str, dict[str, Any]]] = []
        self.runp_hangs = False
        self.ignore_isolation = False
        self.vm_processors: int | None = None  # what the VM really gets, if not as asked
        self.vm_memory_mb: int | None = None
        self.dump_calls: list[str] = []
        self.images: dict[str, str] = {}  # reference -> os.version of what was pulled
        self.image_builds: dict[str, str] = {}  # reference -> os.version a pull gets
        self.pull_fails: dict[str, str] = {}  # reference -> what the pull answers
        self.container_ops: list[tuple[str, str]] = []
        self.written_texts: list[str] = []
        self.computecore = FakeComputeCore(self)

    # -- bookkeeping -----------------------------------------------------------------

    def op(self, name: str) -> None:
        if self.crashed:
            raise SimulatedCrash(f"dead agent called {name}")
        self.ops.append(name)
        if self.crash_at is not None and len(self.ops) == self.crash_at:
            self.crashed = True
            raise SimulatedCrash(name)

    def disk_text(self) -> str | None:
        return self.config.read_text(encoding="utf-8") if self.config.exists() else None

    def loaded_runtimes(self) -> dict[str, Any]:
        return effective_runtimes(self.running_text, self.containerd_version)[0]

    def host(self) -> Host:
        return Host(
            windows=FakeWindows(self),
            containerd=FakeContainerd(self),
            cri=CrictlCri(FakeCrictl(self), "crictl.exe", work_dir=self.root),
            hcs=ComputeCore(self.computecore.dll, self.computecore.kernel32),
        )

    def agent(self, restart_timeout: float = 60.0) -> NodeAgent:
        return self.agent_with(restart_timeout=restart_timeout)

    def agent_with(
        self,
        restart_timeout: float = 60.0,
        adopt: frozenset[str] | set[str] = frozenset(),
        host: Host | None = None,
        canary_images: Mapping[str, str] | None = None,
        pause_image: str | None = None,
    ) -> NodeAgent:
        return NodeAgent(
            host or self.host(),
            Paths(self.config),
            log_root=r"C:\ProgramData\wcow-agent",
            timeouts=Timeouts(restart=restart_timeout, cri_poll=2.0),
            clock=self.clock,
            sleep=self.clock.sleep,
            adopt=adopt,
            canary_images=canary_images,
            pause_image=pause_image,
        )

    def canary_sandboxes(self) -> list[Sandbox]:
        return [s for s in self.sandboxes.values() if "runtime.wcow.dev/canary" in s.labels]


class FakeWindows:
    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def windows_build(self) -> WindowsBuild:
        return WindowsBuild(self.node.build)

    def hyperv_available(self) -> bool:
        return self.node.hyperv


class FakeContainerd:
    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def version(self) -> str:
        self.node.op("containerd --version")
        return self.node.containerd_version

    def config_default(self) -> str:
        self.node.op("containerd config default")
        name = (
            "v2-containerd-1.7-default.toml"
            if self.node.containerd_version.startswith("1.")
            else "v3-containerd-2.1-default.toml"
        )
        return (CONFIGS / name).read_text(encoding="utf-8")

    def config_dump(self, config: Path) -> str:
        self.node.op("containerd config dump")
        text = config.read_text(encoding="utf-8")
        self.node.dump_calls.append(text)
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ContainerdError(
                f"`containerd --config {config} config dump` failed (exit 1): "
                f"containerd: failed to load TOML from {config}: {error}"
            ) from None
        runtimes, default = effective_runtimes(text, self.node.containerd_version)
        version = 2 if self.node.containerd_version.startswith("1.") else 3
        dump: dict[str, Any] = {k: v for k, v in document.items() if k != "plugins"}
        dump["version"] = version
        node = dump
        for name in RUNTIMES_PATH[version][:-1]:
            node = node.setdefault(name, {})
        node["default_runtime_name"] = default
        node["runtimes"] = runtimes
        return tomli_w.dumps(dump)

    def restart(self, timeout: float) -> None:
        node = self.node
        node.op("containerd restart")
        text = node.disk_text()
        node.restarts.append(text)
        why = node.refuse(text)
        if why:
            node.running_text = None
            node.cri_up = False
            if node.refuse_mode == "start":
                raise ContainerdError(
                    "Restart-Service containerd failed: Failed to start service "
                    f"'containerd (containerd)'. {why}"
                )
            return
        node.running_text = text
        node.cri_up = True


_CRICTL_FATAL = 'time="2026-03-02T10:11:12Z" level=fatal msg="{message}"\n'


class FakeCrictl:
    """A command runner that answers like ``crictl.exe`` against this node's containerd."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def __call__(
        self, args: Sequence[str], *, timeout: float, input_text: str | None = None
    ) -> Completed:
        node = self.node
        rest = list(args[1:])
        globals_: dict[str, str] = {}
        while (
            rest
            and rest[0].startswith("--")
            and rest[0]
            in (
                "--runtime-endpoint",
                "--image-endpoint",
                "--timeout",
            )
        ):
            globals_[rest[0]] = rest[1]
            rest = rest[2:]
        command = rest[0]
        node.op(f"crictl {command}")
        node.crictl_calls.append(list(args))
        assert globals_.get("--runtime-endpoint") == "npipe:////./pipe/containerd-containerd"
        assert globals_.get("--timeout", "").endswith("s")
        if not node.cri_up:
            return self._fatal(
                "validate service connection: validate CRI v1 runtime API for endpoint "
                '\\"npipe:////./pipe/containerd-containerd\\": rpc error: code = Unavailable '
                "desc = connection error: open \\\\\\\\.\\\\pipe\\\\containerd-containerd: "
                "The system cannot find the file specified."
            )
        handler = getattr(self, "_" + command.replace("-", "_"))
        result: Completed = handler(rest[1:], timeout)
        return result

    @staticmethod
    def _ok(stdout: str) -> Completed:
        return Completed(0, stdout, "")

    @staticmethod
    def _fatal(message: str) -> Completed:
        return Completed(1, "", _CRICTL_FATAL.format(message=message))

    def _info(self, args: list[str], timeout: float) -> Completed:
        assert args == ["-o", "json"]
        node = self.node
        two = not node.containerd_version.startswith("1.")
        info = wire("crictl-info-2x.json" if two else "crictl-info.json")
        info["status"]["conditions"][1]["status"] = node.network_ready
        if not node.network_ready:
            info["status"]["conditions"][1]["reason"] = "NetworkPluginNotReady"
            info["status"]["conditions"][1]["message"] = (
                "Network plugin returns error: cni config uninitialized"
            )
        if two:
            features = info["runtimeHandlers"][0]["features"]
            info["runtimeHandlers"] = [{"features": features}] + [
                {"features": features, "name": name} for name in sorted(node.loaded_runtimes())
            ]
        return self._ok(json.dumps(info, indent=2) + "\n")

    def _runp(self, args: list[str], timeout: float) -> Completed:
        node = self.node
        assert args[0] == "--runtime", args
        handler, path = args[1], args[2]
        config = json.loads(Path(path).read_text(encoding="utf-8"))
        node.crictl_inputs.append(("runp", config))
        metadata = config.get("metadata") or {}
        if not metadata.get("name") or not metadata.get("namespace"):
            return self._fatal("load podSandboxConfig: name or namespace is not in metadata")
        if node.runp_hangs:
            node.clock.now += timeout + 10
            sandbox_id = self._create_sandbox(config, handler)  # it comes up after all
            raise CommandTimeoutError(f"crictl runp did not finish in {timeout:.0f} s (killed)")
        runtimes = node.loaded_runtimes()
        if handler not in runtimes:
            return self._fatal(
                "run pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
                f'runtime: no runtime for \\"{handler}\\" is configured'
            )
        sandbox_id = self._create_sandbox(config, handler)
        return self._ok(sandbox_id + "\n")

    def _create_sandbox(self, config: dict[str, Any], handler: str) -> str:
        node = self.node
        sandbox_id = uuid.uuid4().hex + uuid.uuid4().hex
        metadata = config["metadata"]
        node.sandboxes[sandbox_id] = Sandbox(
            sandbox_id,
            metadata["name"],
            metadata["namespace"],
            metadata.get("uid", ""),
            handler,
            dict(config.get("labels") or {}),
        )
        runtime = node.loaded_runtimes().get(handler, {})
        options = runtime.get("options") or {}
        template = {s["SystemType"]: s for s in wire("hcs-enumerate.json", SANDBOX_ID=sandbox_id)}
        if options.get("SandboxIsolation") == 1 and not node.ignore_isolation:
            vm = dict(template["VirtualMachine"])
            if runtime.get("runtime_path"):  # hcsshim: Owner = base name of its own binary
                vm["Owner"] = PureWindowsPath(runtime["runtime_path"]).name
            vm["_memoryMB"] = node.vm_memory_mb or options.get("VmMemorySizeInMb", 1024)
            vm["_processors"] = node.vm_processors or min(
                options.get("VmProcessorCount", 2), node.logical_processors
            )
            node.systems[vm["Id"]] = vm
        else:
            node.systems[sandbox_id] = dict(template["Container"])
        return sandbox_id

    def _sandbox(self, sandbox_id: str) -> Sandbox | None:
        return self.node.sandboxes.get(sandbox_id)

    def _not_found(self, sandbox_id: str) -> Completed:
        return self._fatal(
            f'getting the pod sandbox status for \\"{sandbox_id}\\": rpc error: code = '
            "NotFound desc = an error occurred when try to find sandbox: not found"
        )

    def _fill(self, template: str, sandbox: Sandbox) -> Any:
        return wire(
            template,
            SANDBOX_ID=sandbox.id,
            NAME=sandbox.name,
            NAMESPACE=sandbox.namespace,
            UID=sandbox.uid,
            HANDLER=sandbox.handler,
            STATE=sandbox.state,
        )

    def _inspectp(self, args: list[str], timeout: float) -> Completed:
        assert args[:2] == ["-o", "json"]
        sandbox = self._sandbox(args[2])
        if sandbox is None:
            return self._not_found(args[2])
        document = self._fill("crictl-inspectp.json", sandbox)
        document["status"]["labels"] = sandbox.labels
        return self._ok(json.dumps(document, indent=2) + "\n")

    def _pods(self, args: list[str], timeout: float) -> Completed:
        assert args[:2] == ["-o", "json"]
        wanted = {}
        for index, word in enumerate(args):
            if word == "--label":
                key, value = args[index + 1].split("=", 1)
                wanted[key] = value
        items = []
        for sandbox in self.node.sandboxes.values():
            if all(sandbox.labels.get(k) == v for k, v in wanted.items()):
                item = self._fill("crictl-pods.json", sandbox)["items"][0]
                item["labels"] = sandbox.labels
                items.append(item)
        return self._ok(json.dumps({"items": items}, indent=2) + "\n")

    def _stopp(self, args: list[str], timeout: float) -> Completed:
        sandbox = self._sandbox(args[0])
        if sandbox is None:
            return self._not_found(args[0])
        sandbox.state = "SANDBOX_NOTREADY"
        self.node.systems.pop(f"{sandbox.id}@vm", None)
        self.node.systems.pop(sandbox.id, None)
        return self._ok(f"Stopped sandbox {sandbox.id}\n")

    def _rmp(self, args: list[str], timeout: float) -> Completed:
        assert args[0] == "--force"
        sandbox = self.node.sandboxes.pop(args[1], None)
        if sandbox is None:
            return self._not_found(args[1])
        self.node.systems.pop(f"{sandbox.id}@vm", None)
        self.node.systems.pop(sandbox.id, None)
        return self._ok(f"Removed sandbox {sandbox.id}\n")

    def _pull(self, args: list[str], timeout: float) -> Completed:
        (image,) = args
        problem = self.node.pull_fails.get(image)
        if problem:
            return self._fatal(f"pulling image: {problem}")
        self.node.images.setdefault(image, self.node.image_builds.get(image, self._host()))
        return self._ok(f"Image is up to date for sha256:{'ab' * 32}\n")

    def _host(self) -> str:
        return f"10.0.{self.node.build}.1"

    def _inspecti(self, args: list[str], timeout: float) -> Completed:
        assert args[:2] == ["-o", "json"], args
        image = args[2]
        if image not in self.node.images:
            return self._fatal(f'no such image \\"{image}\\" present')
        repo = image.rsplit(":", 1)[0]
        document = wire(
            "crictl-inspecti.json", OS_VERSION=self.node.images[image], IMAGE=image, REPO=repo
        )
        return self._ok(json.dumps(document, indent=2))

    def _stop(self, args: list[str], timeout: float) -> Completed:
        (container_id,) = args
        self.node.container_ops.append(("stop", container_id))
        return self._ok(container_id + "\n")

    def _rm(self, args: list[str], timeout: float) -> Completed:
        assert args[0] == "--force", args
        container_id = args[1]
        self.node.container_ops.append(("rm", container_id))
        for sandbox in self.node.sandboxes.values():
            sandbox.containers.pop(container_id, None)
        return self._ok(container_id + "\n")

    def _create(self, args: list[str], timeout: float) -> Completed:
        sandbox_id, container_path, sandbox_path = args
        container = json.loads(Path(container_path).read_text(encoding="utf-8"))
        self.node.crictl_inputs.append(("create", container))
        self.node.crictl_inputs.append(
            ("create-sandbox", json.loads(Path(sandbox_path).read_text()))
        )
        sandbox = self._sandbox(sandbox_id)
        if sandbox is None:
            return self._not_found(sandbox_id)
        container_id = uuid.uuid4().hex * 2
        sandbox.containers[container_id] = container
        return self._ok(container_id + "\n")

    def _start(self, args: list[str], timeout: float) -> Completed:
        return self._ok(args[0] + "\n")

    def _exec(self, args: list[str], timeout: float) -> Completed:
        assert args[:3] == ["--sync", "--timeout", args[2]]
        container_id, command = args[3], args[4:]
        owner = next(
            (s for s in self.node.sandboxes.values() if container_id in s.containers), None
        )
        if owner is None:
            return self._fatal(f'container \\"{container_id}\\" not found')
        if command[-1] == "echo %NUMBER_OF_PROCESSORS%":
            vm = self.node.systems.get(f"{owner.id}@vm")
            count = vm["_processors"] if vm else self.node.logical_processors
            return self._ok(f"{count}\r\n")
        return self._fatal("unexpected command")


class FakeComputeCore:
    """computecore.dll and kernel32.LocalFree as ctypes callbacks with the real signatures.

    Records every call; result documents are real wide-string buffers whose addresses go
    through the out-pointers, and must come back through LocalFree."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.calls: list[tuple[Any, ...]] = []
        self.operations: dict[int, dict[str, Any]] = {}
        self.open_systems: dict[int, str] = {}
        self.live_documents: dict[int, Any] = {}
        self.freed: list[int] = []
        self.bad_frees: list[int] = []
        self._handles = itertools.count(0x1000, 8)
        self.enumerate_result: int = 0
        impls = {
            "HcsCreateOperation": self.create_operation,
            "HcsCloseOperation": self.close_operation,
            "HcsCancelOperation": self.cancel_operation,
            "HcsWaitForOperationResult": self.wait,
            "HcsEnumerateComputeSystems": self.enumerate,
            "HcsOpenComputeSystem": self.open,
            "HcsGetComputeSystemProperties": self.properties,
            "HcsCloseComputeSystem": self.close_system,
            "HcsGetServiceProperties": self.service_properties,
        }
        self._keep: list[Any] = []
        self.dll = type("computecore", (), {})()
        for name, (restype, argtypes) in COMPUTECORE_SIGNATURES.items():
            thunk = ctypes.CFUNCTYPE(restype, *argtypes)(impls[name])
            self._keep.append(thunk)
            setattr(self.dll, name, thunk)
        self.kernel32 = type("kernel32", (), {})()
        restype, argtypes = KERNEL32_SIGNATURES["LocalFree"]
        thunk = ctypes.CFUNCTYPE(restype, *argtypes)(self.local_free)
        self._keep.append(thunk)
        self.kernel32.LocalFree = thunk

    def _document(self, text: str) -> int:
        buffer = ctypes.create_unicode_buffer(text)
        address = ctypes.addressof(buffer)
        self.live_documents[address] = buffer
        return address

    def create_operation(self, context: int | None, callback: int | None) -> int:
        self.calls.append(("HcsCreateOperation", context, callback))
        handle = next(self._handles)
        self.operations[handle] = {"document": "", "hresult": 0}
        return handle

    def close_operation(self, operation: int) -> None:
        self.calls.append(("HcsCloseOperation", operation))
        self.operations.pop(operation)

    def cancel_operation(self, operation: int) -> int:
        self.calls.append(("HcsCancelOperation", operation))
        return 0

    def wait(self, operation: int, milliseconds: int, out: Any) -> int:
        self.calls.append(("HcsWaitForOperationResult", operation, milliseconds))
        pending = self.operations[operation]
        if pending["document"]:
            out[0] = self._document(pending["document"])
        return int(pending["hresult"])

    def enumerate(self, query: str | None, operation: int) -> int:
        self.calls.append(("HcsEnumerateComputeSystems", json.loads(query or "{}"), operation))
        if self.node.crashed:
            return E_FAIL
        if self.enumerate_result:
            self.operations[operation]["hresult"] = self.enumerate_result
            self.operations[operation]["document"] = json.dumps(
                {"Error": self.enumerate_result, "ErrorMessage": "The operation timed out."}
            )
            return 0
        wanted = json.loads(query or "{}").get("Ids")
        systems = [
            {k: v for k, v in s.items() if not k.startswith("_")}
            for system_id, s in self.node.systems.items()
            if wanted is None or system_id in wanted
        ]
        self.operations[operation]["document"] = json.dumps(systems)
        return 0

    def open(self, system_id: str, access: int, out: Any) -> int:
        self.calls.append(("HcsOpenComputeSystem", system_id, access))
        if self.node.crashed or system_id not in self.node.systems:
            return ctypes.c_int32(HCS_E_SYSTEM_NOT_FOUND).value
        handle = next(self._handles)
        self.open_systems[handle] = system_id
        out[0] = handle
        return 0

    def properties(self, system: int, operation: int, query: str | None) -> int:
        system_id = self.open_systems[system]
        self.calls.append(
            ("HcsGetComputeSystemProperties", system_id, json.loads(query or "{}"), operation)
        )
        record = self.node.systems[system_id]
        document = wire("hcs-memory.json", SANDBOX_ID=system_id.removesuffix("@vm"))
        document["Memory"]["VirtualMachineMemory"]["AssignedMemory"] = record["_memoryMB"] * 256
        self.operations[operation]["document"] = json.dumps(document)
        return 0

    def close_system(self, system: int) -> None:
        self.calls.append(("HcsCloseComputeSystem", system))
        self.open_systems.pop(system)

    def service_properties(self, query: str | None, out: Any) -> int:
        self.calls.append(("HcsGetServiceProperties", json.loads(query or "{}")))
        document = wire("hcs-processor-topology.json")
        document["Properties"][0]["LogicalProcessorCount"] = self.node.logical_processors
        out[0] = self._document(json.dumps(document))
        return 0

    def local_free(self, address: int | None) -> None:
        if address is None or address not in self.live_documents:
            self.bad_frees.append(address or 0)
            return
        del self.live_documents[address]
        self.freed.append(address)

    def assert_clean(self) -> None:
        """Every operation closed, every opened system closed, every document freed."""
        assert self.operations == {}, f"operations never closed: {self.operations}"
        assert self.open_systems == {}, f"compute systems left open: {self.open_systems}"
        assert self.live_documents == {}, "result documents never freed with LocalFree"
        assert self.bad_frees == [], f"LocalFree of unknown pointers: {self.bad_frees}"


class FakeCluster:
    """The API server as the agent sees it (its ``Cluster`` boundary)."""

    def __init__(self, node_name: str = "win-1") -> None:
        self.node_name = node_name
        self.node = {
            "uid": "0d6f1c1e-1",
            "labels": {
                "kubernetes.io/os": "windows",
                "node.kubernetes.io/windows-build": "10.0.20348",
            },
            "annotations": {},
            "taints": [],
        }
        self.taint_patches: list[list[dict[str, Any]]] = []
        self.plan = PlanObject(exists=False)
        self.plan_reads: list[str] = []
        self.patches: list[tuple[str, dict[str, str | None], dict[str, str | None]]] = []
        self.events: list[tuple[str, str, str, bool]] = []
        self.watch_queue: queue.Queue[PlanObject] = queue.Queue()
        self.watch_calls: list[tuple[str, str | None]] = []
        self.rollout = RolloutObject(exists=False)
        self.rollout_reads = 0
        self.rollout_queue: queue.Queue[RolloutObject] = queue.Queue()
        self._versions = itertools.count(100)

    def set_plan(self, plan: Plan | Mapping[str, Any] | None, paced: bool = False) -> PlanObject:
        """The plan ConfigMap holding ``plan`` (a document as it is: a forged one, say)."""
        version = str(next(self._versions))
        if plan is None:
            self.plan = PlanObject(False, None, version)
        else:
            text = dump_plan(plan) if isinstance(plan, Plan) else dump_json(plan)
            self.plan = PlanObject(True, text, version, paced=paced)
        return self.plan

    def set_rollout(self, text: str | None) -> RolloutObject:
        """The rollout ConfigMap with ``rollout.json`` = ``text`` (None: deleted)."""
        version = str(next(self._versions))
        self.rollout = (
            RolloutObject(False, None, version)
            if text is None
            else RolloutObject(True, text, version)
        )
        return self.rollout

    def get_rollout(self, namespace: str) -> RolloutObject:
        self.rollout_reads += 1
        return self.rollout

    def watch_rollout(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[RolloutObject]:
        while True:
            try:
                yield self.rollout_queue.get(timeout=0.05)
            except queue.Empty:
                return

    def get_plan(self, namespace: str) -> PlanObject:
        self.plan_reads.append(namespace)
        return self.plan

    def watch_plan(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[PlanObject]:
        self.watch_calls.append((namespace, resource_version))
        while True:
            try:
                yield self.watch_queue.get(timeout=0.05)
            except queue.Empty:
                return

    def get_node(self, name: str) -> NodeObject:
        assert name == self.node_name, f"the agent read another Node: {name}"
        return NodeObject(
            name,
            self.node["uid"],
            dict(self.node["labels"]),
            dict(self.node["annotations"]),
            tuple(dict(t) for t in self.node["taints"]),
        )

    def replace_taints(
        self, name: str, current: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
    ) -> None:
        assert name == self.node_name, f"the agent changed another Node's taints: {name}"
        if [dict(t) for t in current] != self.node["taints"]:  # the JSON patch's test op
            raise ClusterError("the test operation failed: the taints changed", 422)
        self.node["taints"] = [dict(t) for t in taints]
        self.taint_patches.append(self.node["taints"])

    def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        assert name == self.node_name, f"the agent patched another Node: {name}"
        self.patches.append((name, dict(labels), dict(annotations)))
        for target, changes in (
            (self.node["labels"], labels),
            (self.node["annotations"], annotations),
        ):
            for key, value in changes.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value

    def node_event(self, node: NodeObject, reason: str, message: str, warning: bool) -> None:
        self.events.append((node.name, reason, message, warning))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.node["labels"])

    @property
    def status(self) -> dict[str, Any]:
        text = self.node["annotations"].get("runtime.wcow.dev/agent-status")
        return json.loads(text) if text else {}
