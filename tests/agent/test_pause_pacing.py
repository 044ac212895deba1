"""A pause image change alone is paced by the agent's readiness.

The DaemonSet's rolling update moves to the next node only once the new agent pod is ready,
so /readyz stays false on a node until the pause image change the agent made there is proven
(containerd came up with it, every handler Ready before passed its canary again), and stays
false with the reason, the change rolled back, when it failed, until the flag changes.
These run the real agent against the simulated Windows host (``wcow_agent.simulator``).
"""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from wcow_agent.config.sandbox_image import configured_pause_image
from wcow_agent.config.state import AgentState, Paths, load_state
from wcow_agent.cycle.decisions import CycleReport
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.pause_change import readiness_hold
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_agent.simulator.faults import Faults, SimulatedCrash, parse_fault
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.wire.plan import Plan
from wcow_support.health import StepHealth

# Images of the host's build (20348) and of an older guest build.
PAUSE_2022 = "registry.example.com/pause:3.10-ltsc2022"
PAUSE_2022_NEXT = "registry.example.com/pause:3.10.1-ltsc2022"
PAUSE_2019 = "registry.example.com/pause:3.10-ltsc2019"
BUILDS = ((PAUSE_2022, "10.0.20348"), (PAUSE_2022_NEXT, "10.0.20348"), (PAUSE_2019, "10.0.17763"))
SEEDED = "mcr.microsoft.com/oss/kubernetes/pause:3.9"  # the simulator's containerd 1.7 default


class Sim:
    """One simulated node, and an agent process per flag value (as each DaemonSet pod)."""

    def __init__(self, tmp_path: Path, *faults: str) -> None:
        self.node = SimulatedNode(
            "sim-1",
            tmp_path / "sim-1",
            HostSettings(image_builds=BUILDS),
            Faults.for_node("sim-1", [parse_fault(f) for f in faults]),
        )

    def agent(self, pause_image: str | None = None) -> NodeAgent:
        return NodeAgent(
            self.node.host(),
            Paths(self.node.config),
            log_root=str(self.node.root / "logs"),
            timeouts=Timeouts(restart=5.0, cri_poll=0.01),
            pause_image=pause_image,
        )

    def state(self) -> AgentState:
        return load_state(Paths(self.node.config).state)[0]

    def hold(self) -> str | None:
        return readiness_hold(self.state())

    def running_pause(self) -> str | None:
        return configured_pause_image(tomllib.loads(self.node.running_text or ""))

    def restarts(self) -> list[str]:
        return [e.event for e in self.node.journal if e.event in ("restart", "restart-failed")]


def states(report: CycleReport) -> dict[str, tuple[str, str]]:
    return {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()}


def reasons(report: CycleReport) -> list[str]:
    return [reason for reason, _, _ in report.events]


def both() -> Plan:
    return make_plan(hyperv(), process())


def test_a_pause_change_that_keeps_the_handlers_ready_is_proven(tmp_path: Path) -> None:
    sim = Sim(tmp_path)
    plan = both()
    assert states(sim.agent().reconcile(plan)) == {
        "hv": ("Ready", "CanaryPassed"),
        "proc": ("Ready", "CanaryPassed"),
    }
    canaries = len([e for e in sim.node.journal if e.event == "sandbox-start"])

    report = sim.agent(PAUSE_2022).reconcile(plan)

    assert report.result == "applied"
    assert sim.running_pause() == PAUSE_2022
    # Both handlers passed a canary after the restart, with the new pause image.
    assert len([e for e in sim.node.journal if e.event == "sandbox-start"]) - canaries == 2
    assert states(report) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert reasons(report)[:1] == ["PauseImageChanging"]
    assert "PauseImageProven" in reasons(report)
    assert sim.state().pause_change is None
    assert sim.hold() is None


def test_containerd_that_will_not_run_the_new_image_is_rolled_back_and_holds_readiness(
    tmp_path: Path,
) -> None:
    sim = Sim(tmp_path, f"restart-fail={PAUSE_2022}")
    plan = both()
    sim.agent().reconcile(plan)

    report = sim.agent(PAUSE_2022).reconcile(plan)

    assert report.result == "rolled_back"
    assert sim.running_pause() == SEEDED
    # The tables did not change and containerd runs the previous file: the handlers are
    # proven again there and stay Ready (their pods keep landing on this node).
    assert states(report) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert "PauseImageFailed" in reasons(report)
    hold = sim.hold() or ""
    assert hold.startswith(f"pause image {PAUSE_2022} failed on this node: containerd did not")
    assert "simulated fault: containerd does not start with" in hold
    assert f"the node keeps {SEEDED}" in hold

    # Not tried again while the flag says the same: no restart, still held, still Ready.
    restarts = sim.restarts()
    again = sim.agent(PAUSE_2022).reconcile(plan)
    assert (again.result, sim.restarts()) == ("unchanged", restarts)
    assert states(again) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert sim.hold() == hold


def test_a_handler_that_fails_after_the_change_rolls_it_back(tmp_path: Path) -> None:
    """A 17763 pause image on a 20348 host: the process handler's sandbox could no longer
    start (process isolation cannot run that build), the 20348 Hyper-V handler is not ready
    for its guest build."""
    sim = Sim(tmp_path)
    plan = both()
    sim.agent().reconcile(plan)

    changed = sim.agent(PAUSE_2019).reconcile(plan)

    assert changed.result == "applied"
    assert states(changed) == {
        "hv": ("Failed", "GuestBuildUnsupported"),
        "proc": ("Failed", "GuestBuildUnsupported"),
    }
    assert changed.requeue
    hold = sim.hold() or ""
    assert "proc was Ready before and is Failed now (GuestBuildUnsupported" in hold
    assert "process isolation cannot run" in hold
    assert "hv was Ready before and is Failed now (GuestBuildUnsupported" in hold

    # The next cycle (the same agent pod) writes the previous value back through the
    # transaction and proves the handlers again with it.
    back = sim.agent(PAUSE_2019).reconcile(plan)

    assert back.result == "applied"
    assert sim.running_pause() == SEEDED
    assert states(back) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert "PauseImageRolledBack" in reasons(back)
    assert sim.hold() == hold  # readiness stays false: the rollout halts at this node
    restarts = sim.restarts()
    assert sim.agent(PAUSE_2019).reconcile(plan).result == "unchanged"
    assert sim.restarts() == restarts


def test_handlers_that_were_not_ready_before_do_not_block(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "canary-fail=broken")
    canary = {"enabled": True, "timeoutSeconds": 60}
    plan = make_plan(
        hyperv(),
        hyperv("old", windowsBuild="ltsc2019", canary=canary),  # GuestBuildUnsupported here
        process("broken"),  # its sandbox never starts
    )
    before = states(sim.agent().reconcile(plan))
    assert before["old"] == ("Failed", "GuestBuildUnsupported")
    assert before["broken"] == ("Failed", "SandboxFailed")

    report = sim.agent(PAUSE_2022).reconcile(plan)

    assert states(report) == before
    assert "PauseImageProven" in reasons(report)
    assert sim.hold() is None


def test_another_flag_value_clears_a_failed_change(tmp_path: Path) -> None:
    sim = Sim(tmp_path)
    plan = both()
    sim.agent().reconcile(plan)
    sim.agent(PAUSE_2019).reconcile(plan)
    sim.agent(PAUSE_2019).reconcile(plan)  # rolled back
    assert sim.hold() is not None

    report = sim.agent(PAUSE_2022_NEXT).reconcile(plan)

    assert "PauseImageRetry" in reasons(report)
    assert "PauseImageProven" in reasons(report)
    assert sim.running_pause() == PAUSE_2022_NEXT
    assert sim.hold() is None
    # The value first replaced is still the one put back when the flag goes.
    assert sim.state().pause_previous == SEEDED


def test_the_flag_set_back_to_what_the_node_keeps_clears_it_without_a_restart(
    tmp_path: Path,
) -> None:
    sim = Sim(tmp_path)
    plan = both()
    sim.agent(PAUSE_2022).reconcile(plan)
    sim.agent(PAUSE_2019).reconcile(plan)
    sim.agent(PAUSE_2019).reconcile(plan)  # back to PAUSE_2022
    assert sim.running_pause() == PAUSE_2022
    restarts = sim.restarts()

    report = sim.agent(PAUSE_2022).reconcile(plan)

    assert (report.result, sim.restarts()) == ("unchanged", restarts)
    assert sim.hold() is None


def test_a_change_whose_canaries_cannot_run_yet_stays_held_until_they_do(
    node: FakeNode,
) -> None:
    """The network is not ready after the restart: the change is loaded but not proven, and
    a new agent process (the pod restarted) proves it, not forgets it."""
    plan = both()
    node.agent().reconcile(plan)
    node.network_ready = False

    report = node.agent_with(pause_image=PAUSE_2022).reconcile(plan)

    assert report.result == "applied"
    assert report.requeue
    assert load_state(Paths(node.config).state)[0].pause_change is not None
    hold = readiness_hold(load_state(Paths(node.config).state)[0])
    assert hold == f"pause image change to {PAUSE_2022}: proving hv, proc with canaries"

    node.network_ready = True
    runp = sum("runp" in c for c in node.crictl_calls)
    proven = node.agent_with(pause_image=PAUSE_2022).reconcile(plan)
    assert "PauseImageProven" in reasons(proven)
    assert sum("runp" in c for c in node.crictl_calls) - runp == 2
    assert readiness_hold(load_state(Paths(node.config).state)[0]) is None


def test_readyz_and_the_metric_follow_the_change(node: FakeNode, cluster: FakeCluster) -> None:
    cluster.set_plan(both())
    node.agent().reconcile(both())  # the handlers are Ready before the change
    loop = AgentLoop(
        node.agent_with(pause_image=PAUSE_2022),
        cluster,
        RunOptions(node_name="win-1"),
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
        now=lambda: "2026-03-02T10:00:00Z",
    )

    def phase(name: str) -> Any:
        return loop.metrics.registry.get_sample_value(
            "wcow_agent_pause_image_change", {"phase": name}
        )

    node.network_ready = False
    loop.cycle()
    ready, text = loop.readiness()
    assert (ready, text) == (
        False,
        f"pause image change to {PAUSE_2022}: proving hv, proc with canaries",
    )
    assert loop.health.liveness() == (True, "ok")
    assert (phase("proving"), phase("failed")) == (1, 0)

    node.network_ready = True
    loop.cycle()
    assert loop.readiness() == (True, "ok")
    assert phase("proving") == 0
    assert any(e[1] == "PauseImageProven" for e in cluster.events)


def test_an_agent_killed_mid_change_proves_it_when_it_starts_again(tmp_path: Path) -> None:
    """Killed after writing config.toml, before restarting containerd: the next agent
    finishes the restart (recovery), finds the change loaded, and still proves it."""
    sim = Sim(tmp_path)
    plan = both()
    sim.agent().reconcile(plan)
    sim.node.faults.kills_left = 1  # the kill-mid-apply fault, for the pause change
    with pytest.raises(SimulatedCrash):
        sim.agent(PAUSE_2022).reconcile(plan)
    assert (
        sim.hold()
        == f"pause image change to {PAUSE_2022}: waiting for containerd to come up with it"
    )

    report = sim.agent(PAUSE_2022).reconcile(plan)

    assert sim.running_pause() == PAUSE_2022
    assert "RestartRecovery" in reasons(report)
    assert [c.handler for c in report.canaries] == ["hv", "proc"]  # the canaries ran again
    assert "PauseImageProven" in reasons(report)
    assert sim.hold() is None


def test_an_image_set_again_after_another_is_tried_again(tmp_path: Path) -> None:
    """The failure is kept while the flag names the image; naming it anew (after another
    value) is a new try, even for a file containerd refused before."""
    sim = Sim(tmp_path, f"restart-fail={PAUSE_2022}")
    plan = both()
    sim.agent().reconcile(plan)
    sim.agent(PAUSE_2022).reconcile(plan)
    sim.agent(PAUSE_2022_NEXT).reconcile(plan)
    assert (sim.running_pause(), sim.hold()) == (PAUSE_2022_NEXT, None)
    failed_restarts = sim.restarts().count("restart-failed")

    again = sim.agent(PAUSE_2022).reconcile(plan)

    assert again.result == "rolled_back"
    assert sim.restarts().count("restart-failed") == failed_restarts + 1
    assert sim.running_pause() == PAUSE_2022_NEXT
    assert (sim.hold() or "").startswith(f"pause image {PAUSE_2022} failed on this node")
