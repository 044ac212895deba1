"""``wcow-agent simulate``: a fleet of Windows nodes without Windows.

Registers N Node objects with the labels a Windows node's kubelet sets, and runs for each
the real agent loop (``runner.AgentLoop`` over ``cycle.NodeAgent``) against an in-memory
Windows host (``simulate/host.py``), all in one process. The operator cannot tell these
nodes from real ones: it sees their labels and agent-status annotations.

Threads: two per node (the agent's loop and its plan watch, one watch connection each), so
N nodes cost 2N threads and N watches on the plan ConfigMap, as N real agents would.

An agent killed by the ``kill-mid-apply`` fault is started again on the same node after a
second (what the DaemonSet's restart does), and recovers from what its predecessor left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wcow_agent.attempt import Timeouts
from wcow_agent.cluster import Cluster
from wcow_agent.cycle import NodeAgent
from wcow_agent.metrics import Metrics
from wcow_agent.runner import AgentLoop
from wcow_agent.simulate.host import (
    Fault,
    Faults,
    HostSettings,
    JournalEntry,
    SimulatedCrash,
    SimulatedNode,
    parse_fault,
)
from wcow_agent.state import Paths
from wcow_agent.watch import RunOptions
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_support.health import StepHealth

log = logging.getLogger("wcow_agent.simulate")

SIMULATED_ANNOTATION = "runtime.wcow.dev/simulated"
SIMULATED_TAINT = {"key": "runtime.wcow.dev/simulated", "value": "true", "effect": "NoSchedule"}
RESTART_AFTER_KILL_SECONDS = 1.0


class FleetCluster(Cluster, Protocol):
    """What the simulator needs beyond an agent's ``Cluster``: Node objects of its own."""

    def register_node(
        self,
        name: str,
        labels: dict[str, str],
        annotations: dict[str, str],
        taints: list[dict[str, str]],
    ) -> bool: ...

    def delete_node(self, name: str) -> None: ...

    def close(self) -> None: ...


def node_labels(name: str, build: str) -> dict[str, str]:
    """The labels the kubelet puts on a Windows Server node."""
    return {
        "kubernetes.io/os": "windows",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/windows-build": parse_windows_build(build).label_value,
        "node.kubernetes.io/instance-type": "simulated",
    }


@dataclass
class FleetOptions:
    nodes: int
    namespace: str
    name_prefix: str = "sim-win-"
    settings: HostSettings = field(default_factory=HostSettings)
    faults: Sequence[Fault] = ()
    resync_seconds: float = 300.0
    retry_seconds: float = 10.0
    drift_check_seconds: float = 30.0
    restart_timeout: float = 60.0
    startup_taint: str | None = None
    """Register the Nodes with this NoSchedule taint, as a node pool would; each agent
    removes it from its Node (``wcow_agent.startup``)."""
    pause_image: str | None = None
    """The agents' ``--pause-image`` (None: they leave the key as the node has it)."""

    def names(self) -> list[str]:
        width = len(str(self.nodes))
        return [f"{self.name_prefix}{i:0{width}d}" for i in range(1, self.nodes + 1)]


class SimulatedAgent:
    """One node's agent, started again when a fault kills it."""

    def __init__(
        self,
        node: SimulatedNode,
        cluster: Cluster,
        options: FleetOptions,
    ) -> None:
        self.node = node
        self.cluster = cluster
        self.options = options
        self.incarnations = 0
        self._stopped = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=node.name, daemon=True)
        self.loop: AgentLoop | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._stop.set()
        if self.loop is not None:
            self.loop.wake.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _new_loop(self) -> AgentLoop:
        self._stop = threading.Event()
        if self._stopped.is_set():
            self._stop.set()
        self.node.cancel = self._stop
        agent = NodeAgent(
            self.node.host(),
            Paths(self.node.config),
            log_root=str(self.node.root / "logs"),
            timeouts=Timeouts(restart=self.options.restart_timeout, cri_poll=0.5),
            cancel=self._stop,
            pause_image=self.options.pause_image,
        )
        run = RunOptions(
            node_name=self.node.name,
            namespace=self.options.namespace,
            resync_seconds=self.options.resync_seconds,
            drift_check_seconds=self.options.drift_check_seconds,
            retry_seconds=self.options.retry_seconds,
            startup_taint=self.options.startup_taint,
        )
        return AgentLoop(
            agent, self.cluster, run, metrics=Metrics(), health=StepHealth(), stop=self._stop
        )

    def _supervise(self) -> None:
        while not self._stopped.is_set():
            self.loop = self._new_loop()
            self.incarnations += 1
            try:
                self.loop.run()
            except SimulatedCrash as crash:
                log.warning("%s: %s; starting the agent again", self.node.name, crash)
                self._stop.set()  # ends the dead agent's plan watch
                self._stopped.wait(RESTART_AFTER_KILL_SECONDS)
                continue
            except Exception:
                log.exception("%s: the agent loop ended with an error", self.node.name)
            return


class Fleet:
    """N simulated Windows nodes and their agents against one cluster."""

    def __init__(
        self,
        options: FleetOptions,
        root: Path,
        cluster_factory: Callable[[], FleetCluster],
        journal: Callable[[JournalEntry], None] | None = None,
    ) -> None:
        self.options = options
        self.root = root
        self.cluster_factory = cluster_factory
        self.journal = journal
        self.nodes: dict[str, SimulatedNode] = {}
        self.agents: dict[str, SimulatedAgent] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self._clusters: list[FleetCluster] = []
        self._admin: FleetCluster | None = None

    def _startup_taints(self) -> list[dict[str, str]]:
        key = self.options.startup_taint
        return [{"key": key, "value": "pending", "effect": "NoSchedule"}] if key else []

    def start(self) -> None:
        """Register the Nodes, then start an agent per node (each with its own client)."""
        admin = self._admin = self.cluster_factory()
        settings = self.options.settings
        for name in self.options.names():
            if admin.register_node(
                name,
                node_labels(name, settings.build),
                {SIMULATED_ANNOTATION: "wcow-agent simulate"},
                [dict(SIMULATED_TAINT), *self._startup_taints()],
            ):
                self.created.append(name)
            self.nodes[name] = SimulatedNode(
                name,
                self.root / name,
                settings,
                Faults.for_node(name, self.options.faults),
                journal=self.journal,
            )
        for name, node in self.nodes.items():
            cluster = self.cluster_factory()
            self._clusters.append(cluster)
            agent = SimulatedAgent(node, cluster, self.options)
            self.agents[name] = agent
            agent.start()

    def stop(self, cleanup: bool = True, timeout: float = 30.0) -> list[str]:
        """Stop every agent (after its current step); with ``cleanup``, delete the Nodes this
        fleet created. Returns what could not be cleaned up."""
        for agent in self.agents.values():
            agent.stop()
        deadline = time.monotonic() + timeout
        for agent in self.agents.values():
            agent.join(max(0.1, deadline - time.monotonic()))
        problems = [f"agent of {n} did not stop" for n, a in self.agents.items() if a.alive()]
        if cleanup and self._admin is not None:
            for name in self.created:
                try:
                    self._admin.delete_node(name)
                    self.deleted.append(name)
                except Exception as error:  # noqa: BLE001 - report every node not deleted
                    problems.append(f"Node {name} not deleted: {error}")
        for cluster in [*self._clusters, *([self._admin] if self._admin else [])]:
            with contextlib.suppress(Exception):
                cluster.close()
        return problems


# -- the command -----------------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="run N simulated Windows nodes (real agent loop, in-memory Windows host)",
        description="Registers N Windows Node objects (unless they exist) and runs the real "
        "agent loop for each against an in-memory Windows host, in this process, against the "
        "cluster the kubeconfig points at. Ctrl-C or SIGTERM stops the agents and deletes "
        "the Nodes this run created (--no-cleanup keeps them). Nothing runs on Windows.",
    )
    simulate.add_argument("--nodes", type=int, required=True, help="how many nodes")
    simulate.add_argument("--name-prefix", default="sim-win-", help="Node names: PREFIX1..PREFIXN")
    simulate.add_argument(
        "--namespace",
        default=os.environ.get("WCOW_PLAN_NAMESPACE") or "wcow-system",
        help="the operator's namespace, where the plan ConfigMap is (default wcow-system)",
    )
    simulate.add_argument(
        "--kubeconfig", default=None, help="default: KUBECONFIG or ~/.kube/config"
    )
    _add_host_settings(simulate)
    simulate.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[=VALUE][@NODES]",
        help="canary-fail[=HANDLER], restart-fail[=HANDLER|IMAGE], slow-canary=SECONDS, "
        "kill-mid-apply[=TIMES], pull-fail[=IMAGE]; @NODES is a node name or glob "
        "(default: every node). Repeatable",
    )
    simulate.add_argument("--state-dir", default=None, help="nodes' disks (default: a temp dir)")
    simulate.add_argument(
        "--cleanup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="delete the Nodes this run created when it stops (default yes)",
    )
    simulate.add_argument("--resync-seconds", type=float, default=300.0)
    simulate.add_argument("--retry-seconds", type=float, default=10.0)
    simulate.add_argument("--journal", default=None, help="append host steps as JSON lines here")
    simulate.add_argument(
        "--startup-taint",
        default=None,
        metavar="KEY",
        help="register the Nodes with the NoSchedule taint KEY=pending, which each agent "
        "removes once every handler has a verdict (as wcow-agent run --startup-taint)",
    )
    simulate.add_argument("--log-level", default="INFO")
    simulate.set_defaults(func=cmd_simulate)


def _add_host_settings(simulate: Any) -> None:
    """What every simulated host is (``HostSettings``)."""
    simulate.add_argument("--host-build", default="10.0.20348", metavar="10.0.N")
    simulate.add_argument(
        "--hyperv",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="whether the hosts can run Hyper-V isolation (default yes)",
    )
    simulate.add_argument(
        "--pause-build",
        default=None,
        metavar="10.0.N",
        help="the build of the pause image the nodes pull (default: the host's): a node pool "
        "for Hyper-V pods of that guest build",
    )
    simulate.add_argument("--containerd-version", default="1.7.20")
    simulate.add_argument("--logical-processors", type=int, default=8)
    simulate.add_argument(
        "--restart-seconds", type=float, default=1.0, help="how long a containerd restart takes"
    )
    simulate.add_argument(
        "--canary-seconds", type=float, default=0.5, help="how long a canary sandbox takes to start"
    )


def fleet_options(args: argparse.Namespace) -> FleetOptions:
    """The options, checked; ValueError names the flag and the value."""
    if args.nodes < 1:
        raise ValueError(f"--nodes must be at least 1, not {args.nodes}")
    try:
        parse_windows_build(args.host_build)
    except ValueError as error:
        raise ValueError(f"--host-build {args.host_build!r}: {error}") from None
    if args.pause_build is not None:
        try:
            parse_windows_build(args.pause_build)
        except ValueError as error:
            raise ValueError(f"--pause-build {args.pause_build!r}: {error}") from None
    settings = HostSettings(
        pause_build=args.pause_build,
        build=args.host_build,
        hyperv=args.hyperv,
        containerd_version=args.containerd_version,
        logical_processors=args.logical_processors,
        restart_seconds=args.restart_seconds,
        canary_seconds=args.canary_seconds,
    )
    return FleetOptions(
        nodes=args.nodes,
        namespace=args.namespace,
        name_prefix=args.name_prefix,
        settings=settings,
        faults=[parse_fault(text) for text in args.fault],
        resync_seconds=args.resync_seconds,
        retry_seconds=args.retry_seconds,
        startup_taint=args.startup_taint or None,
    )


class JsonLines:
    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def __call__(self, entry: JournalEntry) -> None:
        line = json.dumps(
            {"time": entry.time, "node": entry.node, "event": entry.event, "detail": entry.detail},
            sort_keys=True,
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def cmd_simulate(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(threadName)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        options = fleet_options(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from wcow_agent.k8s import KubernetesCluster  # noqa: PLC0415 - the client only here

    def cluster() -> FleetCluster:
        return KubernetesCluster.from_kubeconfig(args.kubeconfig)

    temporary = args.state_dir is None
    root = Path(args.state_dir or tempfile.mkdtemp(prefix="wcow-simulate-"))
    journal = JsonLines(Path(args.journal)) if args.journal else None
    fleet = Fleet(options, root, cluster, journal)
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        stop.set()

    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), handle)
    code = 0
    try:
        fleet.start()
        print(
            f"{len(fleet.nodes)} simulated Windows nodes ({options.settings.build}, Hyper-V "
            f"{'yes' if options.settings.hyperv else 'no'}, containerd "
            f"{options.settings.containerd_version}) watching {options.namespace}/"
            f"wcow-runtime-plan; disks under {root}. Ctrl-C stops.",
            file=sys.stderr,
        )
        stop.wait()
    except Exception as error:  # noqa: BLE001 - any API or config failure ends the run
        print(f"error: {error}", file=sys.stderr)
        code = 1
    finally:
        problems = fleet.stop(cleanup=args.cleanup)
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        if fleet.deleted:
            print(f"deleted {len(fleet.deleted)} Node(s) this run created", file=sys.stderr)
        if journal is not None:
            journal.close()
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    return code
