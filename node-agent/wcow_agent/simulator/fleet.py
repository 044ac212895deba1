"""``wcow-agent simulate``: a fleet of Windows nodes without Windows.

Registers N Node objects with the labels a Windows node's kubelet sets, and runs for each
the real agent loop (``loop.agent_loop.AgentLoop`` over ``cycle.node_agent.NodeAgent``)
against an in-memory Windows host (``simulator/node.py``), all in one process. The operator
cannot tell these nodes from real ones: it sees their labels and agent-status annotations.

Threads: two per node (the agent's loop and its plan watch, one watch connection each), so
N nodes cost 2N threads and N watches on the plan ConfigMap, as N real agents would.

An agent killed by the ``kill-mid-apply`` fault is started again on the same node after a
second (what the DaemonSet's restart does), and recovers from what its predecessor left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wcow_agent.config.state import Paths
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster import Cluster
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_agent.simulator.faults import Fault, Faults, SimulatedCrash
from wcow_agent.simulator.node import HostSettings, JournalEntry, SimulatedNode
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
