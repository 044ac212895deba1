"""``wcow-agent simulate``: its flags, and a fleet run against an in-memory cluster (the
real API server runs in tests/fleet)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan
from wcow_agent.cli import build_parser
from wcow_agent.commands.simulate_command import fleet_options
from wcow_agent.loop.cluster import ClusterError, NodeObject, PlanObject, RolloutObject
from wcow_agent.simulator.faults import parse_fault
from wcow_agent.simulator.fleet import Fleet, FleetCluster, FleetOptions
from wcow_agent.simulator.node import HostSettings
from wcow_contract.wire.plan import dump_plan


class MemoryCluster:
    """Nodes and the plan in memory, shared by every client the fleet makes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.plan = PlanObject(False)
        self.clients = 0
        self.closed = 0

    def client(self) -> FleetCluster:
        self.clients += 1
        return MemoryClient(self)


class MemoryClient:
    def __init__(self, store: MemoryCluster) -> None:
        self.store = store

    def get_plan(self, namespace: str) -> PlanObject:
        return self.store.plan

    def watch_plan(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[PlanObject]:
        time.sleep(0.05)
        yield self.store.plan

    def get_rollout(self, namespace: str) -> RolloutObject:
        return RolloutObject(False)

    def watch_rollout(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[RolloutObject]:
        time.sleep(0.05)
        yield RolloutObject(False)

    def get_node(self, name: str) -> NodeObject:
        with self.store.lock:
            node = self.store.nodes[name]
            return NodeObject(
                name,
                "uid",
                dict(node["labels"]),
                dict(node["annotations"]),
                tuple(dict(t) for t in node.get("taints", [])),
            )

    def replace_taints(
        self, name: str, current: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
    ) -> None:
        with self.store.lock:
            node = self.store.nodes[name]
            if [dict(t) for t in current] != node.get("taints", []):
                raise ClusterError("the test operation failed: the taints changed", 422)
            node["taints"] = [dict(t) for t in taints]

    def patch_node(
        self, name: str, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
    ) -> None:
        with self.store.lock:
            node = self.store.nodes[name]
            for target, changes in ((node["labels"], labels), (node["annotations"], annotations)):
                for key, value in changes.items():
                    if value is None:
                        target.pop(key, None)
                    else:
                        target[key] = value

    def node_event(self, node: NodeObject, reason: str, message: str, warning: bool) -> None:
        pass

    def register_node(
        self,
        name: str,
        labels: dict[str, str],
        annotations: dict[str, str],
        taints: list[dict[str, str]],
    ) -> bool:
        with self.store.lock:
            if name in self.store.nodes:
                if self.store.nodes[name]["labels"].get("kubernetes.io/os") != "windows":
                    raise ClusterError(f"Node {name} exists and is not a Windows node")
                return False
            self.store.nodes[name] = {
                "labels": dict(labels),
                "annotations": dict(annotations),
                "taints": taints,
            }
            return True

    def delete_node(self, name: str) -> None:
        with self.store.lock:
            self.store.nodes.pop(name, None)

    def close(self) -> None:
        self.store.closed += 1


def until(what: str, check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def options(nodes: int, *faults: str) -> FleetOptions:
    return FleetOptions(
        nodes=nodes,
        namespace="wcow-system",
        name_prefix="sim-",
        settings=HostSettings(),
        faults=[parse_fault(f) for f in faults],
        retry_seconds=0.2,
    )


def test_flags_are_checked_naming_the_flag() -> None:
    parser = build_parser()
    for argv, words in [
        (["--nodes", "0"], "--nodes must be at least 1, not 0"),
        (["--nodes", "2", "--host-build", "20348"], "--host-build '20348'"),
        (["--nodes", "2", "--fault", "melt"], "unknown kind 'melt'"),
    ]:
        args = parser.parse_args(["simulate", *argv])
        with pytest.raises(ValueError, match=words):
            fleet_options(args)
    args = parser.parse_args(
        ["simulate", "--nodes", "3", "--no-hyperv", "--fault", "slow-canary=2@sim-win-2"]
    )
    parsed = fleet_options(args)
    assert parsed.names() == ["sim-win-1", "sim-win-2", "sim-win-3"]
    assert parsed.settings.hyperv is False
    assert parsed.namespace == "wcow-system"


def test_fleet_registers_windows_nodes_applies_and_cleans_up_what_it_created(
    tmp_path: Path,
) -> None:
    store = MemoryCluster()
    store.nodes["sim-1"] = {"labels": {"kubernetes.io/os": "windows"}, "annotations": {}}
    store.plan = PlanObject(True, dump_plan(make_plan(hyperv("hv"))), "7")
    fleet = Fleet(options(2, "kill-mid-apply@sim-2"), tmp_path, store.client)
    fleet.start()
    try:
        assert fleet.created == ["sim-2"]  # sim-1 existed: used, not created
        labels = store.nodes["sim-2"]["labels"]
        assert labels["kubernetes.io/os"] == "windows"
        assert labels["node.kubernetes.io/windows-build"] == "10.0.20348"
        assert labels["kubernetes.io/hostname"] == "sim-2"
        assert store.nodes["sim-2"]["taints"][0]["effect"] == "NoSchedule"
        until(
            "both nodes ready",
            lambda: all(
                store.nodes[n]["labels"].get("runtime.wcow.dev/hv") == "ready"
                for n in ("sim-1", "sim-2")
            ),
        )
        # sim-2's first agent died between writing config.toml and restarting containerd;
        # the one started after it finished the restart.
        assert fleet.agents["sim-2"].incarnations == 2
        assert fleet.agents["sim-1"].incarnations == 1
        events = [e.event for e in fleet.nodes["sim-2"].journal]
        assert events.index("killed") < events.index("restart")
        assert fleet.nodes["sim-2"].running_text == fleet.nodes["sim-2"].disk_text()
    finally:
        problems = fleet.stop(cleanup=True, timeout=20)
    assert problems == []
    assert list(store.nodes) == ["sim-1"]  # only what the fleet created is deleted
    assert fleet.deleted == ["sim-2"]
    assert store.closed == store.clients


def test_an_existing_node_that_is_not_windows_is_refused(tmp_path: Path) -> None:
    store = MemoryCluster()
    store.nodes["sim-1"] = {"labels": {"kubernetes.io/os": "linux"}, "annotations": {}}
    fleet = Fleet(options(1), tmp_path, store.client)
    with pytest.raises(ClusterError, match="not a Windows node"):
        fleet.start()
    assert fleet.stop() == []
    assert store.nodes["sim-1"]["labels"]["kubernetes.io/os"] == "linux"
