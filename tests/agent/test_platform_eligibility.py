"""What a node's platform decides before any table is written: a Hyper-V handler on block CIM
layers with containerd 2.3+ (its shim refuses it), Hyper-V on a platform that does not run it
(the reason names the platform), and a node the agent could not place (nothing written, the
reason on every handler). Also ``--restart-mode none`` in the Windows host adapter."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.agent.conftest import hyperv, make_plan, process
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.state import Paths
from wcow_agent.cycle.eligibility import Host, classify_handlers, effective_snapshotter
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.host.windows import NoRestart
from wcow_agent.simulator.containerd import SimulatedContainerd
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.catalog.windows_builds import WindowsBuild

IMAGES = "io.containerd.cri.v1.images"
RUNTIME = "io.containerd.cri.v1.runtime"


def dump(snapshotter: str | None = None, **runtimes: dict[str, Any]) -> dict[str, Any]:
    images: dict[str, Any] = {"snapshotter": snapshotter} if snapshotter else {}
    return {
        "version": 4,
        "plugins": {
            IMAGES: images,
            RUNTIME: {"containerd": {"runtimes": runtimes}},
            # Every 2.2+ default config has the plugin's table: it selects nothing.
            "io.containerd.snapshotter.v1.blockcim": {},
        },
    }


def judge(effective: dict[str, Any] | None, version: str = "2.3.1") -> Any:
    plan = make_plan(hyperv("hv"), process("proc"))
    host = Host(WindowsBuild(20348), True, version, effective=effective)
    return classify_handlers(plan.handlers, host)


def test_a_hyperv_handler_on_block_cim_is_not_eligible_on_containerd_2_3() -> None:
    eligible, refused = judge(dump("blockcim"))
    assert set(eligible) == {"proc"}
    assert refused["hv"].reason == "HyperVOnBlockCim"
    assert "images plugin" in refused["hv"].message
    assert "not supported with block CIM layers" in refused["hv"].message


@pytest.mark.parametrize("version", ["2.2.7", "1.7.20"])
def test_older_shims_are_left_to_the_canary(version: str) -> None:
    eligible, _ = judge(dump("blockcim"), version)
    assert set(eligible) == {"hv", "proc"}


def test_the_blockcim_plugin_table_alone_selects_nothing() -> None:
    eligible, _ = judge(dump("windows"))
    assert set(eligible) == {"hv", "proc"}
    eligible, _ = judge(dump())
    assert set(eligible) == {"hv", "proc"}


def test_unknown_configuration_is_not_judged() -> None:
    eligible, _ = judge(None)
    assert set(eligible) == {"hv", "proc"}


def test_the_effective_snapshotter_is_the_handler_own_first() -> None:
    effective = dump("blockcim", hv={"snapshotter": "windows"})
    assert effective_snapshotter("hv", {}, effective)[0] == "windows"
    assert effective_snapshotter("hv", {"snapshotter": "blockcim"}, dump("windows"))[0] == (
        "blockcim"
    )
    assert effective_snapshotter("other", {}, effective)[0] == "blockcim"
    version2 = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"snapshotter": "x"}}}}
    assert effective_snapshotter("hv", {}, version2) == ("x", "the CRI images plugin's snapshotter")
    assert effective_snapshotter("hv", {}, {}) == (None, "containerd's default")


class BlockCimContainerd(SimulatedContainerd):
    """The simulated containerd, whose images plugin unpacks with blockcim."""

    def config_dump(self, config: Path) -> str:
        effective = tomllib.loads(super().config_dump(config))
        effective["plugins"].setdefault(IMAGES, {})["snapshotter"] = "blockcim"
        return tomli_w.dumps(effective)


def agent(node: SimulatedNode, **kwargs: Any) -> NodeAgent:
    return NodeAgent(
        node.host(),
        Paths(node.config),
        log_root=str(node.root / "logs"),
        timeouts=Timeouts(restart=5.0, cri_poll=0.01),
        **kwargs,
    )


def test_the_agent_refuses_hyperv_on_a_block_cim_node(tmp_path: Path) -> None:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings(containerd_version="2.3.1"))
    host = replace(node.host(), containerd=BlockCimContainerd(node))
    nodeagent = NodeAgent(host, Paths(node.config), log_root=str(tmp_path / "logs"))
    report = nodeagent.reconcile(make_plan(hyperv("hv"), process("proc")))
    handlers = report.handlers or {}
    assert handlers["hv"].state == "NotEligible"
    assert handlers["hv"].reason == "HyperVOnBlockCim"
    assert handlers["proc"].state == "Ready"


def test_a_platform_without_hyperv_says_so_in_the_reason(tmp_path: Path) -> None:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings(hyperv=False))
    why = "AKS does not support Hyper-V isolated Windows containers: Azure/AKS#1792"
    report = agent(node, hyperv_why=why).reconcile(make_plan(hyperv("hv")))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason, outcome.message) == (
        "NotEligible",
        "HyperVUnavailable",
        why,
    )


def test_an_unplaced_node_writes_nothing_and_says_why(tmp_path: Path) -> None:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings())
    before = node.disk_text()
    reason = "this node has no containerd service and no rke2 service"
    layout = NodeLayout("custom", node.config, restart_mode="none", unplaced=reason)
    report = agent(node, layout=layout).reconcile(make_plan(hyperv("hv"), process("proc")))
    assert report.result == "refused"
    assert {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()} == {
        "hv": ("Failed", "NodeLayoutUnknown"),
        "proc": ("Failed", "NodeLayoutUnknown"),
    }
    assert (report.handlers or {})["hv"].message == reason
    assert node.disk_text() == before
    assert not [e for e in node.journal if e.event in ("preflight", "restart")]


def test_the_default_layout_is_the_agent_flags(tmp_path: Path) -> None:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings())
    layout = agent(node).layout
    assert (layout.distribution, layout.config, layout.restart_mode) == (
        "custom",
        node.config,
        "service",
    )


def test_restart_mode_none_never_restarts() -> None:
    NoRestart().restart(5.0)  # returns at once, touches nothing
