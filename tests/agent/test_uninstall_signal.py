"""The running agent uninstalls itself when the plan ConfigMap carries
``runtime.wcow.dev/uninstall`` (``wcow-operator uninstall``, the chart's pre-delete hook):
tables, pause image key, files, then its labels and annotations; then it stays idle."""

from __future__ import annotations

import threading
import tomllib
from dataclasses import replace

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from tests.agent.test_pause_image import PAUSE_2019
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_contract.wire.uninstall import UNINSTALL_ERROR_ANNOTATION, leftovers
from wcow_support.health import StepHealth

SIGNAL = "2026-11-25T04:00:00Z"
OWN = {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.20348"}


def loop_with_pause_image(node: FakeNode, cluster: FakeCluster) -> AgentLoop:
    return AgentLoop(
        node.agent_with(pause_image=PAUSE_2019),
        cluster,
        RunOptions("win-1"),
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
        now=lambda: "2026-11-25T03:00:00Z",
    )


def signal(loop: AgentLoop, cluster: FakeCluster, value: str | None = SIGNAL) -> None:
    cluster.plan = replace(cluster.plan, uninstall=value)
    loop.on_plan(cluster.plan)


def test_the_signal_leaves_host_and_node_as_before_the_agent(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv(), process()))
    cluster.node["labels"]["node.runtime.wcow.dev/guest-build-17763"] = "true"  # a pool's own
    cluster.node["annotations"]["runtime.wcow.dev/canary-request"] = "1"
    loop = loop_with_pause_image(node, cluster)
    loop.cycle()
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"
    assert cluster.labels["node.runtime.wcow.dev/guest-build-20348"] == "true"
    assert tomllib.loads(node.config.read_text()) != tomllib.loads(DEFAULT_17)
    node.restarts.clear()

    signal(loop, cluster)
    loop.cycle()

    assert tomllib.loads(node.config.read_text()) == tomllib.loads(DEFAULT_17), (
        "tables removed and the pause image key put back"
    )
    assert len(node.restarts) == 1
    assert [p.name for p in node.root.iterdir() if p.name.startswith("config.toml")] == [
        "config.toml"
    ]
    assert cluster.labels == {**OWN, "node.runtime.wcow.dev/guest-build-17763": "true"}
    assert cluster.node["annotations"] == {}
    assert not leftovers(cluster.labels, cluster.node["annotations"])


def test_after_the_signal_the_agent_writes_nothing_until_a_plan_with_handlers(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = loop_with_pause_image(node, cluster)
    loop.cycle()
    signal(loop, cluster)
    loop.cycle()
    patches, config = len(cluster.patches), node.config.read_text()

    # The hook removes the signal once every node is clean; the profiles are gone.
    loop.on_plan(cluster.set_plan(make_plan()))
    loop.cycle()
    loop.cycle()
    assert len(cluster.patches) == patches, "idle: no status, no labels written again"
    assert node.config.read_text() == config

    # A new profile (the uninstall was given up): the agent works again.
    loop.on_plan(cluster.set_plan(make_plan(process())))
    loop.cycle()
    assert cluster.labels["runtime.wcow.dev/proc"] == "ready"
    assert cluster.labels["node.runtime.wcow.dev/hyperv"] == "true"
    assert cluster.status["handlers"]["proc"]["state"] == "Ready"


def test_a_node_that_cannot_uninstall_says_why_and_keeps_its_labels(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = loop_with_pause_image(node, cluster)
    loop.cycle()
    merged = node.config.read_text()
    node.faults.refuse = lambda text: "broken" if "runtime.wcow.dev" not in text else None

    signal(loop, cluster)
    report = loop.cycle()

    assert report.requeue
    assert node.config.read_text() == merged, "the file with the tables is put back"
    why = cluster.node["annotations"][UNINSTALL_ERROR_ANNOTATION]
    assert "containerd did not come up without the agent's tables" in why
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"
    assert set(leftovers(cluster.labels, cluster.node["annotations"])) >= {
        UNINSTALL_ERROR_ANNOTATION,
        "runtime.wcow.dev/agent-status",
    }

    node.faults.refuse = lambda text: None  # fixed on the node: the next try cleans it
    loop.cycle()
    assert not leftovers(cluster.labels, cluster.node["annotations"])
