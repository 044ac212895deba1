"""The simulated Windows host (``wcow_agent.simulator.node``) under the real NodeAgent: it
must follow config.toml as containerd, CRI and HCS do, so that the agent's checks really
pass or fail on it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import edited, hyperv, make_plan, process
from wcow_agent.config.state import Paths, load_state
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.simulator.containerd import effective_runtimes, load_problem
from wcow_agent.simulator.faults import Fault, Faults, SimulatedCrash, parse_fault
from wcow_agent.simulator.hcs import vm_size
from wcow_agent.simulator.node import HostSettings, SimulatedNode


def agent_for(node: SimulatedNode) -> NodeAgent:
    return NodeAgent(
        node.host(),
        Paths(node.config),
        log_root=str(node.root / "logs"),
        timeouts=Timeouts(restart=5.0, cri_poll=0.01),
    )


def simulated(tmp_path: Path, **settings: Any) -> SimulatedNode:
    return SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings(**settings))


def runtimes_on_disk(node: SimulatedNode) -> dict[str, Any]:
    return effective_runtimes(node.disk_text(), node.settings.containerd_version)[0]


def test_vm_size_follows_hcsshim_defaults_rounding_and_cap() -> None:
    assert vm_size({}, 8) == vm_size({"VmProcessorCount": 0}, 8)
    assert (vm_size({}, 8).processors, vm_size({}, 8).memory_mb) == (2, 1024)
    assert vm_size({}, 1).processors == 1
    assert vm_size({"VmProcessorCount": 16, "VmMemorySizeInMb": 2047}, 4).processors == 4
    assert vm_size({"VmMemorySizeInMb": 2047}, 4).memory_mb == 2048
    annotated = {
        "VmMemorySizeInMb": 2048,
        "DefaultContainerAnnotations": {
            "io.microsoft.virtualmachine.computetopology.memory.sizeinmb": "4096"
        },
    }
    assert vm_size(annotated, 8).memory_mb == 4096  # the annotation wins, as in hcsshim


@pytest.mark.parametrize(
    "containerd_version", ["1.6.39", "1.7.20", "2.0.0", "2.3.1"], ids=lambda v: f"containerd-{v}"
)
def test_profiles_apply_and_canaries_pass(tmp_path: Path, containerd_version: str) -> None:
    node = simulated(tmp_path, containerd_version=containerd_version)
    plan = make_plan(hyperv("hv", vm={"processorCount": 4, "memoryMB": 3072}), process("proc"))
    report = agent_for(node).reconcile(plan)

    assert report.result == "applied", report.events
    assert {h: o.state for h, o in (report.handlers or {}).items()} == {
        "hv": "Ready",
        "proc": "Ready",
    }
    hv = next(c for c in report.canaries if c.handler == "hv")
    assert hv.observed["memoryMB"] == 3072  # what HCS reports of the VM the table asks for
    runtimes = runtimes_on_disk(node)
    assert runtimes["hv"]["options"]["VmMemorySizeInMb"] == 3072
    assert node.running_text == node.disk_text()
    events = [e.event for e in node.journal]
    # On containerd 2.3+ a Hyper-V handler's eligibility reads the configuration containerd
    # runs first (its snapshotter: block CIM), a dump like the preflight's.
    first = 1 if containerd_version.startswith("2.3") else 0
    assert events[:first] == ["preflight"] * first
    assert events[first : first + 3] == ["preflight", "restart", "restarted"]
    assert not node.sandboxes, "canary sandboxes were removed"


def test_a_handler_that_configures_the_wrong_vm_fails_its_canary(tmp_path: Path) -> None:
    """The plan says 2048 MB but the table asks for 8192: HCS reports the table's VM."""
    node = simulated(tmp_path)
    plan = make_plan(hyperv("hv"))
    runtime = copy.deepcopy(plan.handlers["hv"].runtime)
    runtime["options"]["VmMemorySizeInMb"] = 8192
    plan = edited(plan, "hv", runtime=runtime)
    report = agent_for(node).reconcile(plan)
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "VmSizeMismatch"), outcome


def test_a_hyperv_handler_without_sandbox_isolation_runs_process_isolated(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    plan = make_plan(hyperv("hv"))
    runtime = copy.deepcopy(plan.handlers["hv"].runtime)
    del runtime["options"]["SandboxIsolation"]
    plan = edited(plan, "hv", runtime=runtime)
    report = agent_for(node).reconcile(plan)
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "IsolationMismatch"), outcome


def test_an_option_of_the_wrong_type_fails_the_sandbox(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    plan = make_plan(hyperv("hv"))
    runtime = copy.deepcopy(plan.handlers["hv"].runtime)
    runtime["options"]["VmProcessorCount"] = "four"
    plan = edited(plan, "hv", runtime=runtime)
    report = agent_for(node).reconcile(plan)
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "SandboxFailed"), outcome
    assert "VmProcessorCount" in outcome.message


def test_without_hyperv_the_hyperv_handler_is_not_eligible(tmp_path: Path) -> None:
    node = simulated(tmp_path, hyperv=False)
    report = agent_for(node).reconcile(make_plan(hyperv("hv"), process("proc")))
    states = {h: o.state for h, o in (report.handlers or {}).items()}
    assert states == {"hv": "NotEligible", "proc": "Ready"}
    assert "hv" not in runtimes_on_disk(node)


def test_containerd_refuses_a_malformed_runtime_table(tmp_path: Path) -> None:
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = "x"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.x]\nruntime_type = 3\n'
    )
    assert load_problem(text, "1.7.20") == "runtime 'x': runtime_type must be a non-empty string"
    assert load_problem("version = [", "1.7.20") is not None
    assert load_problem(text.replace("= 3", '= "io.containerd.runhcs.v1"'), "1.7.20") is None


def test_restart_fault_rolls_back_and_keeps_containerd_running(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    node.faults = Faults(restart_fail={"hv"})
    before = node.disk_text()
    report = agent_for(node).reconcile(make_plan(hyperv("hv"), process("proc")))
    assert report.result == "rolled_back"
    assert node.disk_text() == before
    assert node.running
    assert node.running_text == before
    assert (report.handlers or {})["hv"].reason == "ContainerdRolledBack"


def test_canary_fault_fails_only_the_named_handler(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    node.faults = Faults(canary_fail={"proc"})
    report = agent_for(node).reconcile(make_plan(hyperv("hv"), process("proc")))
    states = {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()}
    assert states == {"hv": ("Ready", "CanaryPassed"), "proc": ("Failed", "SandboxFailed")}


def test_slow_canary_past_its_timeout_is_a_canary_timeout(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    node.faults = Faults(slow_canary_seconds=2.0)
    plan = make_plan(process("proc"))
    canary = plan.handlers["proc"].canary.model_copy(update={"timeout_seconds": 0.2})
    plan = edited(plan, "proc", canary=canary)  # the CRD's minimum is 10 s
    report = agent_for(node).reconcile(plan)
    assert (report.handlers or {})["proc"].reason == "CanaryTimeout"


def test_agent_killed_mid_apply_is_recovered_by_the_next_one(tmp_path: Path) -> None:
    node = simulated(tmp_path)
    node.faults = Faults(kills_left=1)
    plan = make_plan(hyperv("hv"))
    with pytest.raises(SimulatedCrash):
        agent_for(node).reconcile(plan)
    written = node.disk_text()
    assert written is not None
    assert "hv" in runtimes_on_disk(node)
    assert node.running_text != written  # containerd still runs the old file
    assert load_state(Paths(node.config).state)[0].restart_pending

    report = agent_for(node).reconcile(copy.deepcopy(plan))
    assert "RestartRecovery" in [e[0] for e in report.events]
    assert node.running_text == written
    assert (report.handlers or {})["hv"].state == "Ready"


def test_fault_flags_parse_and_bad_ones_name_the_problem() -> None:
    assert parse_fault("canary-fail=hv@sim-win-0*") == Fault("canary-fail", "hv", "sim-win-0*")
    assert parse_fault("kill-mid-apply") == Fault("kill-mid-apply", None, "*")
    faults = Faults.for_node(
        "sim-2", [parse_fault("slow-canary=2.5@sim-2"), parse_fault("slow-canary=9@sim-3")]
    )
    assert faults.slow_canary_seconds == 2.5
    for bad, words in [
        ("explode", "unknown kind 'explode'"),
        ("slow-canary", "needs =SECONDS"),
        ("slow-canary=soon", "'soon' is not a number"),
        ("kill-mid-apply=x", "'x' is not a number of times"),
        ("canary-fail@", "empty node name"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_fault(bad)
