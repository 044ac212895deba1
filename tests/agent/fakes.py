"""The Windows-host double of the agent's tests: the simulator's node, seen through the real
wire formats, and the API server.

``FakeNode`` is the simulator's ``SimulatedNode`` (its disk, containerd service, CRI, HCS and
faults: one Windows host in memory, the same one ``wcow-agent simulate`` runs) with what only
tests add on top:
- ``FakeCrictl``, a command runner that answers like the ``crictl`` binary in front of the
  node's CRI: it parses the agent's command line, reads the JSON request files it was given
  and prints what crictl prints (templates in ``wire/``), so the agent's real ``CrictlCri``
  is tested;
- ``FakeComputeCore``, ctypes callbacks with computecore.dll's signatures in front of the
  node's HCS, so the agent's real ``ComputeCore`` makes real ctypes calls, writes real
  out-pointers, and must free every result document with ``LocalFree``;
- a fake clock the agent and the node share, containerd's real default files
  (``tests/fixtures/configs``), every shim a handler names installed, and the requests
  recorded (crictl command lines and files, config dumps), so tests check the agent's
  requests, not only its results.
``FakeCluster`` is the API server as the agent sees it (its ``Cluster`` boundary).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import queue
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.node_paths import NodePaths
from wcow_agent.config.state import Paths
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.host.computecore import (
    COMPUTECORE_SIGNATURES,
    HCS_E_SYSTEM_NOT_FOUND,
    KERNEL32_SIGNATURES,
    ComputeCore,
)
from wcow_agent.host.crictl import CrictlCri
from wcow_agent.host.interfaces import CriError, Host
from wcow_agent.host.process import Completed
from wcow_agent.loop.cluster import ClusterError, NodeObject, PlanObject, RolloutObject
from wcow_agent.simulator.containerd import SimulatedContainerd
from wcow_agent.simulator.cri import Sandbox, SimulatedCri
from wcow_agent.simulator.hcs import SimulatedHcs
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.wire.canonical import dump_json
from wcow_contract.wire.plan import Plan, dump_plan

WIRE = Path(__file__).resolve().parent / "wire"
CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
E_FAIL = ctypes.c_int32(0x80004005).value


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def passes(self, seconds: float) -> bool:
        """The node's ``sleep``: time passes at once; the agent never stops meanwhile."""
        self.now += seconds
        return False


def wire(name: str, **values: str) -> Any:
    text = (WIRE / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return json.loads(text)


def containerd_default(containerd_version: str) -> str:
    """What ``containerd config default`` prints on Windows, captured from the real binary."""
    name = (
        "v2-containerd-1.7-default.toml"
        if containerd_version.startswith("1.")
        else "v3-containerd-2.1-default.toml"
    )
    return (CONFIGS / name).read_text(encoding="utf-8")


class FakeNode(SimulatedNode):
    """One Windows node: the simulator's, with crictl and computecore.dll in front of its CRI
    and HCS, and the names the tests read (``restarts``: the files containerd restarted
    with; ``ops``: the host calls; ``cri_up``: containerd answers on CRI)."""

    def __init__(
        self,
        root: Path,
        *,
        build: int = 20348,
        hyperv: bool = True,
        containerd_version: str = "1.7.20",
        logical_processors: int = 8,
        config_text: str | None = None,
        paths: NodePaths | None = None,
        layout: NodeLayout | None = None,
    ) -> None:
        """``paths``, ``layout``: a node whose containerd configuration lives where its
        distribution keeps it (``root`` is then the folder of config.toml)."""
        self.layout = layout
        if config_text is not None:
            (root / "config.toml").write_text(config_text, encoding="utf-8")
        self.clock = FakeClock()
        settings = HostSettings(
            build=f"10.0.{build}",
            hyperv=hyperv,
            containerd_version=containerd_version,
            logical_processors=logical_processors,
            config_default=containerd_default(containerd_version),
            seed_config=False,  # no config.toml: containerd runs on its built-in defaults
            shim_paths=None,
        )
        super().__init__("win-1", root, settings, sleep=self.clock.passes, paths=paths)
        self.running = True  # each test starts from containerd up with the node's file
        self.crictl_calls: list[list[str]] = []
        self.crictl_inputs: list[tuple[str, dict[str, Any]]] = []
        self.container_ops: list[tuple[str, str]] = []
        self.dump_calls: list[str] = []
        self.written_texts: list[str] = []
        self.computecore = FakeComputeCore(self)

    # -- the names the tests read ------------------------------------------------------

    @property  # type: ignore[override]
    def restarts(self) -> list[str | None]:
        return self.restarted_with

    @property
    def ops(self) -> list[str]:
        return self.calls

    def op(self, name: str) -> None:
        self.call(name)

    @property
    def cri_up(self) -> bool:
        return self.running

    @cri_up.setter
    def cri_up(self, up: bool) -> None:
        self.running = up

    @property
    def logical_processors(self) -> int:
        return self.settings.logical_processors

    @property
    def containerd_version(self) -> str:
        return self.settings.containerd_version

    @containerd_version.setter
    def containerd_version(self, version: str) -> None:
        """containerd upgraded (or the node's real binary's): its defaults come with it."""
        self.settings = replace(
            self.settings, containerd_version=version, config_default=containerd_default(version)
        )

    # -- the agent on this node ----------------------------------------------------------

    def host(self) -> Host:
        return Host(
            windows=super().host().windows,
            containerd=RecordedContainerd(self),
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
        layout: NodeLayout | None = None,
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
            layout=layout or self.layout,
            node_paths=self.paths,
        )

    def canary_sandboxes(self) -> list[Sandbox]:
        return [s for s in self.sandboxes.values() if "runtime.wcow.dev/canary" in s.labels]


class RecordedContainerd(SimulatedContainerd):
    """The node's containerd, with every file ``config dump`` was asked about kept."""

    node: FakeNode

    def __init__(self, node: FakeNode) -> None:
        super().__init__(node)

    def config_dump(self, config: Path) -> str:
        self.node.dump_calls.append(config.read_text(encoding="utf-8"))
        return super().config_dump(config)


_CRICTL_FATAL = 'time="2026-03-02T10:11:12Z" level=fatal msg="{message}"\n'
_CRI_DOWN = (
    "validate service connection: validate CRI v1 runtime API for endpoint "
    '\\"npipe:////./pipe/containerd-containerd\\": rpc error: code = Unavailable '
    "desc = connection error: open \\\\\\\\.\\\\pipe\\\\containerd-containerd: "
    "The system cannot find the file specified."
)
# The simulated CRI says which crictl command failed; crictl itself does not.
_COMMAND_PREFIX = re.compile(r"^crictl(?: [a-z]+)?(?: failed)?: ")


class FakeCrictl:
    """A command runner that answers like ``crictl.exe``, for the node's simulated CRI."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.cri = SimulatedCri(node)

    def __call__(
        self, args: Sequence[str], *, timeout: float, input_text: str | None = None
    ) -> Completed:
        rest = list(args[1:])
        globals_: dict[str, str] = {}
        while rest and rest[0] in ("--runtime-endpoint", "--image-endpoint", "--timeout"):
            globals_[rest[0]] = rest[1]
            rest = rest[2:]
        command = rest[0]
        self.node.crictl_calls.append(list(args))
        assert globals_.get("--runtime-endpoint") == "npipe:////./pipe/containerd-containerd"
        assert globals_.get("--timeout", "").endswith("s")
        handler = getattr(self, "_" + command.replace("-", "_"))
        try:
            result: Completed = handler(rest[1:], timeout)
        except CriError as error:
            if not self.node.running:
                return self._fatal(_CRI_DOWN)
            said = _COMMAND_PREFIX.sub("", str(error)).replace('"', '\\"')
            return self._fatal(said)
        return result

    @staticmethod
    def _ok(stdout: str) -> Completed:
        return Completed(0, stdout, "")

    @staticmethod
    def _fatal(message: str) -> Completed:
        return Completed(1, "", _CRICTL_FATAL.format(message=message))

    def _info(self, args: list[str], timeout: float) -> Completed:
        assert args == ["-o", "json"]
        status = self.cri.status(timeout)
        two = status.handlers is not None
        info = wire("crictl-info-2x.json" if two else "crictl-info.json")
        info["status"]["conditions"][1]["status"] = status.network_ready
        if not status.network_ready:
            info["status"]["conditions"][1]["reason"] = "NetworkPluginNotReady"
            info["status"]["conditions"][1]["message"] = (
                "Network plugin returns error: cni config uninitialized"
            )
        if two:
            features = info["runtimeHandlers"][0]["features"]
            info["runtimeHandlers"] = [{"features": features}] + [
                {"features": features, "name": name} for name in status.handlers or ()
            ]
        return self._ok(json.dumps(info, indent=2) + "\n")

    def _runp(self, args: list[str], timeout: float) -> Completed:
        assert args[0] == "--runtime", args
        handler, path = args[1], args[2]
        config = json.loads(Path(path).read_text(encoding="utf-8"))
        self.node.crictl_inputs.append(("runp", config))
        return self._ok(self.cri.run_pod_sandbox(config, handler, timeout) + "\n")

    def _fill(self, template: str, sandbox_id: str) -> Any:
        sandbox = self.node.sandboxes[sandbox_id]
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
        status = self.cri.pod_sandbox_status(args[2], timeout)
        document = self._fill("crictl-inspectp.json", status.id)
        document["status"]["labels"] = status.labels
        return self._ok(json.dumps(document, indent=2) + "\n")

    def _pods(self, args: list[str], timeout: float) -> Completed:
        assert args[:2] == ["-o", "json"]
        wanted = {}
        for index, word in enumerate(args):
            if word == "--label":
                key, value = args[index + 1].split("=", 1)
                wanted[key] = value
        items = []
        for status in self.cri.list_pod_sandboxes(wanted, timeout):
            item = self._fill("crictl-pods.json", status.id)["items"][0]
            item["labels"] = status.labels
            items.append(item)
        return self._ok(json.dumps({"items": items}, indent=2) + "\n")

    def _stopp(self, args: list[str], timeout: float) -> Completed:
        self.cri.stop_pod_sandbox(args[0], timeout)
        return self._ok(f"Stopped sandbox {args[0]}\n")

    def _rmp(self, args: list[str], timeout: float) -> Completed:
        assert args[0] == "--force"
        self.cri.remove_pod_sandbox(args[1], timeout)
        return self._ok(f"Removed sandbox {args[1]}\n")

    def _pull(self, args: list[str], timeout: float) -> Completed:
        (image,) = args
        self.cri.pull_image(image, timeout)
        return self._ok(f"Image is up to date for sha256:{'ab' * 32}\n")

    def _inspecti(self, args: list[str], timeout: float) -> Completed:
        assert args[:2] == ["-o", "json"], args
        image = args[2]
        version = self.cri.image_os_version(image, timeout)
        if version is None:
            return self._fatal(f'no such image \\"{image}\\" present')
        repo = image.rsplit(":", 1)[0]
        document = wire("crictl-inspecti.json", OS_VERSION=version, IMAGE=image, REPO=repo)
        return self._ok(json.dumps(document, indent=2))

    def _create(self, args: list[str], timeout: float) -> Completed:
        sandbox_id, container_path, sandbox_path = args
        container = json.loads(Path(container_path).read_text(encoding="utf-8"))
        sandbox = json.loads(Path(sandbox_path).read_text(encoding="utf-8"))
        self.node.crictl_inputs.append(("create", container))
        self.node.crictl_inputs.append(("create-sandbox", sandbox))
        return self._ok(self.cri.create_container(sandbox_id, container, sandbox, timeout) + "\n")

    def _start(self, args: list[str], timeout: float) -> Completed:
        self.cri.start_container(args[0], timeout)
        return self._ok(args[0] + "\n")

    def _exec(self, args: list[str], timeout: float) -> Completed:
        assert args[:3] == ["--sync", "--timeout", args[2]]
        container_id, command = args[3], args[4:]
        return self._ok(self.cri.exec_sync(container_id, command, timeout))

    def _stop(self, args: list[str], timeout: float) -> Completed:
        (container_id,) = args
        self.node.container_ops.append(("stop", container_id))
        self.cri.stop_container(container_id, timeout)
        return self._ok(container_id + "\n")

    def _rm(self, args: list[str], timeout: float) -> Completed:
        assert args[0] == "--force", args
        container_id = args[1]
        self.node.container_ops.append(("rm", container_id))
        self.cri.remove_container(container_id, timeout)
        return self._ok(container_id + "\n")


class FakeComputeCore:
    """computecore.dll and kernel32.LocalFree as ctypes callbacks with the real signatures,
    in front of the node's simulated HCS.

    Records every call; result documents are real wide-string buffers whose addresses go
    through the out-pointers, and must come back through LocalFree. Nothing here raises
    (an exception cannot cross a ctypes callback): a dead agent's calls fail with E_FAIL."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.hcs = SimulatedHcs(node)
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
        systems = self.hcs.enumerate_compute_systems(json.loads(query or "{}"), 0.0)
        shape = {key for system in wire("hcs-enumerate.json", SANDBOX_ID="x") for key in system}
        assert all(set(system) <= shape for system in systems), "not HCS's Properties shape"
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
        wanted = json.loads(query or "{}")
        self.calls.append(("HcsGetComputeSystemProperties", system_id, wanted, operation))
        found = self.hcs.compute_system_properties(system_id, wanted["PropertyTypes"], 0.0)
        document = wire("hcs-memory.json", SANDBOX_ID=system_id.removesuffix("@vm"))
        memory = document["Memory"]["VirtualMachineMemory"]
        memory["AssignedMemory"] = found["Memory"]["VirtualMachineMemory"]["AssignedMemory"]
        self.operations[operation]["document"] = json.dumps(document)
        return 0

    def close_system(self, system: int) -> None:
        self.calls.append(("HcsCloseComputeSystem", system))
        self.open_systems.pop(system)

    def service_properties(self, query: str | None, out: Any) -> int:
        wanted = json.loads(query or "{}")
        self.calls.append(("HcsGetServiceProperties", wanted))
        found = self.hcs.service_properties(wanted["PropertyTypes"])
        document = wire("hcs-processor-topology.json")
        count = found["Properties"][0]["LogicalProcessorCount"]
        document["Properties"][0]["LogicalProcessorCount"] = count
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
