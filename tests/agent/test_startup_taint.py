"""The startup taint: a new node keeps pods away until its agent has a verdict for every
handler, then the agent removes that taint (and no other) from its own Node."""

from __future__ import annotations

import threading

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from tests.agent.test_pacing import rollout_text
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_contract.labels import STARTUP_TAINT
from wcow_support.health import StepHealth

STARTUP = {"key": STARTUP_TAINT, "value": "pending", "effect": "NoSchedule"}
OTHERS = {"key": "os", "value": "windows", "effect": "NoSchedule"}


def make_loop(node: FakeNode, cluster: FakeCluster, taint: str | None = STARTUP_TAINT) -> AgentLoop:
    return AgentLoop(
        node.agent(),
        cluster,
        RunOptions(node_name="win-1", startup_taint=taint),
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
        now=lambda: "2026-03-02T10:00:00Z",
    )


def test_the_taint_goes_once_every_handler_has_a_verdict_and_only_that_taint(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.node["taints"] = [dict(OTHERS), dict(STARTUP)]
    # One ready, one the host cannot run (a verdict too: its pods never come here).
    cluster.set_plan(make_plan(hyperv(), hyperv("hv2025", windowsBuild="ltsc2025")))
    loop = make_loop(node, cluster)

    loop.cycle()

    assert cluster.node["taints"] == [OTHERS]
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"
    assert any(reason == "StartupTaintRemoved" for _, reason, _, _ in cluster.events)
    loop.cycle()
    assert len(cluster.taint_patches) == 1, "gone: nothing more to remove"


def test_a_failed_handler_is_a_verdict_and_its_label_keeps_its_pods_away(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.node["taints"] = [dict(STARTUP)]
    node.faults.refuse = lambda text: "bad options" if text and "8192" in text else None
    cluster.set_plan(make_plan(hyperv(vm={"memoryMB": 8192}), process()))

    make_loop(node, cluster).cycle()

    assert cluster.status["handlers"]["hv"]["state"] == "Failed"
    assert "runtime.wcow.dev/hv" not in cluster.labels
    assert cluster.node["taints"] == []


def test_without_a_plan_or_while_waiting_for_the_rollout_the_taint_stays(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.node["taints"] = [dict(STARTUP)]
    loop = make_loop(node, cluster)
    loop.cycle()  # no plan ConfigMap yet: no verdict on anything
    assert cluster.node["taints"] == [STARTUP]

    plan_1 = make_plan(hyperv())
    loop.on_plan(cluster.set_plan(plan_1))
    loop.cycle()
    assert cluster.node["taints"] == []

    # Tainted again (say by hand), then a paced change this node is not let in to yet:
    # its new handler is Pending, so the taint stays.
    cluster.node["taints"] = [dict(STARTUP)]
    plan_2 = make_plan(hyperv(), process())
    loop.on_plan(cluster.set_plan(plan_2, paced=True))
    loop.on_rollout(cluster.set_rollout(rollout_text(plan_2.hash, "win-2")))
    loop.cycle()
    assert cluster.status["handlers"]["proc"]["state"] == "Pending"
    assert cluster.node["taints"] == [STARTUP]


def test_a_taint_added_meanwhile_is_not_lost_and_no_key_means_no_removal(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    cluster.node["taints"] = [dict(STARTUP)]
    make_loop(node, cluster, taint=None).cycle()
    assert cluster.node["taints"] == [STARTUP], "--startup-taint '': the agent removes none"

    loop = make_loop(node, cluster)
    original = cluster.get_node

    def read_then_someone_taints(name: str):  # type: ignore[no-untyped-def]
        read = original(name)
        cluster.node["taints"] = [dict(STARTUP), dict(OTHERS)]
        return read

    cluster.get_node = read_then_someone_taints  # type: ignore[method-assign]
    loop.cycle()
    # The patch's test failed: the other taint stays, the startup taint waits a cycle.
    assert cluster.node["taints"] == [STARTUP, OTHERS]
    assert loop.metrics.cluster_errors._value.get() >= 1
