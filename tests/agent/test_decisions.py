"""The agent's pure decisions: status, labels, restarts, canary checks, versions."""

from __future__ import annotations

import json

import pytest

from tests.agent.conftest import hyperv, make_plan
from wcow_agent.config.containerd_lines import config_version_for
from wcow_agent.config.state import AgentState
from wcow_agent.cycle.canary import (
    CanarySpec,
    check_isolation,
    check_memory,
    check_processors,
    expected_memory_mb,
    pod_config,
)
from wcow_agent.cycle.decisions import (
    CycleReport,
    HandlerOutcome,
    HostFacts,
    build_status,
    label_changes,
    needs_canary,
    restart_reason,
)
from wcow_agent.host.containerd import parse_containerd_version
from wcow_agent.host.crictl import parse_info
from wcow_agent.host.windows import build_from_registry
from wcow_contract.wire.agent_status import AgentStatus, dump_agent_status, parse_agent_status

FACTS = HostFacts("10.0.20348", True, "1.7.20")


def report(**handlers: HandlerOutcome) -> CycleReport:
    return CycleReport(
        facts=FACTS,
        config_version=2,
        plan_hash="sha256:p1",
        applied_plan_hash="sha256:p1",
        handlers=handlers,
    )


def test_status_follows_the_shared_contract_and_keeps_transition_times() -> None:
    first = build_status(
        report(hv=HandlerOutcome("Ready", "CanaryPassed", "ok", 3, 12.3456)), None, "T1"
    )
    assert first is not None
    text = dump_agent_status(first)
    # What the operator reads back with the same model.
    parsed = AgentStatus.model_validate_json(text)
    assert parsed.handlers["hv"].state == "Ready"
    assert json.loads(text)["handlers"]["hv"] == {
        "state": "Ready",
        "reason": "CanaryPassed",
        "message": "ok",
        "profileGeneration": 3,
        "canaryDurationSeconds": 12.346,
        "lastTransitionTime": "T1",
    }
    assert json.loads(text)["hostBuild"] == "10.0.20348"
    assert json.loads(text)["updatedAt"] == "T1"

    # Same state again: nothing changes, not even updatedAt (no write to the API).
    same = build_status(
        report(hv=HandlerOutcome("Ready", "CanaryPassed", "ok", 3, 12.3456)), first, "T2"
    )
    assert same == first
    # A carried result keeps the last canary's message and duration.
    carried = build_status(
        report(hv=HandlerOutcome("Ready", "CanaryPassed", carried=True, generation=3)), first, "T3"
    )
    assert carried == first
    # A new state moves the transition time.
    failed = build_status(
        report(hv=HandlerOutcome("Failed", "CanaryTimeout", "slow", 3, 180.0)), first, "T4"
    )
    assert failed is not None
    assert failed.handlers["hv"].last_transition_time == "T4"
    assert failed.updated_at == "T4"


def test_long_texts_are_clipped_and_escaped_to_the_contracts_limits() -> None:
    message = "containerd said:\n\x1b[31mno\x1b[0m " + "m" * 5000
    status = build_status(report(hv=HandlerOutcome("Failed", "CanaryFailed", message)), None, "T")
    assert status is not None
    text = status.handlers["hv"].message
    assert len(text) == 1024
    assert text.startswith("containerd said:\\n\\x1b[31mno\\x1b[0m mmm")
    assert text.isprintable()


def test_without_a_plan_the_previous_handlers_stay() -> None:
    first = build_status(report(hv=HandlerOutcome("Ready", "CanaryPassed")), None, "T1")
    unknown = CycleReport(facts=FACTS, config_version=2, handlers=None)
    kept = build_status(unknown, first, "T2")
    assert kept is not None
    assert first is not None
    assert kept.handlers == first.handlers
    assert kept.applied_plan_hash == "sha256:p1"
    # The host could not be read: the last known facts stand; never read: no status.
    assert build_status(CycleReport(), first, "T3") == first
    assert build_status(CycleReport(), None, "T3") is None
    failed = CycleReport(handlers={"hv": HandlerOutcome("Failed", "HostFactsUnavailable")})
    after = build_status(failed, first, "T4")
    assert after is not None
    assert after.host_build == "10.0.20348"
    assert after.handlers["hv"].state == "Failed"


def test_unreadable_status_annotation_is_treated_as_absent() -> None:
    assert parse_agent_status("{not json") is None
    assert parse_agent_status(None) is None


def test_labels_set_for_ready_and_removed_for_everything_else() -> None:
    current = {
        "kubernetes.io/os": "windows",
        "runtime.wcow.dev/hv": "ready",
        "runtime.wcow.dev/gone": "ready",
        "runtime.wcow.dev/other": "claimed-by-someone",
    }
    assert label_changes(current, {"hv", "proc"}) == {
        "runtime.wcow.dev/proc": "ready",
        "runtime.wcow.dev/gone": None,
    }
    assert label_changes({"runtime.wcow.dev/hv": "ready"}, {"hv"}) == {}


def test_restart_only_for_unfinished_work() -> None:
    assert restart_reason(AgentState(loaded="a", written="a"), "a") is None
    # Written but never loaded: the agent died between write and restart.
    assert restart_reason(AgentState(loaded="a", written="b"), "b") == "recovery"
    # Someone else's file: not the agent's to restart for.
    assert restart_reason(AgentState(loaded="a", written="a"), "c") is None
    assert restart_reason(AgentState(restart_pending=True), "a") == "recovery"


def test_canary_runs_for_new_changed_failed_or_requested_tables() -> None:
    state = AgentState(canaried={"hv": "sha256:t1"})
    assert not needs_canary("hv", "sha256:t1", state, forced=False, failed_before=False)
    assert needs_canary("hv", "sha256:t2", state, forced=False, failed_before=False)
    assert needs_canary("proc", "sha256:t1", state, forced=False, failed_before=False)
    assert needs_canary("hv", "sha256:t1", state, forced=True, failed_before=False)
    assert needs_canary("hv", "sha256:t1", state, forced=False, failed_before=True)


HV = CanarySpec("hv", "HyperV", 180, processor_count=4, memory_mb=2047)
VM = {
    "Id": "s@vm",
    "SystemType": "VirtualMachine",
    "Owner": "containerd-shim-runhcs-v1.exe",
    "State": "Running",
}


@pytest.mark.parametrize(
    ("systems", "reason"),
    [
        ([VM], None),
        ([{**VM, "Owner": "vmwp.exe"}], "IsolationMismatch"),
        ([{**VM, "SystemType": "Container"}], "IsolationMismatch"),
        ([{**VM, "State": "Stopped"}], "VmNotRunning"),
        ([{"Id": "s", "SystemType": "Container"}], "IsolationMismatch"),
    ],
)
def test_hyperv_isolation_is_read_from_hcs(
    systems: list[dict[str, str]], reason: str | None
) -> None:
    failure = check_isolation(HV, "s", systems)
    assert (failure[0] if failure else None) == reason


def test_process_isolation_means_a_container_and_no_vm() -> None:
    spec = CanarySpec("p", "Process", 60)
    assert check_isolation(spec, "s", [{"Id": "s", "SystemType": "Container"}]) is None
    assert check_isolation(spec, "s", [VM, {"Id": "s", "SystemType": "Container"}]) is not None
    assert check_isolation(spec, "s", []) is not None


def test_memory_is_compared_with_hcsshims_even_rounding() -> None:
    assert expected_memory_mb(2047) == 2048
    pages = 2048 * 256
    ok, observed = check_memory(HV, {"Memory": {"VirtualMachineMemory": {"AssignedMemory": pages}}})
    assert (ok, observed) == (None, 2048.0)
    too_much, _ = check_memory(
        HV, {"Memory": {"VirtualMachineMemory": {"AssignedMemory": 4096 * 256}}}
    )
    assert too_much is not None
    assert too_much[0] == "VmSizeMismatch"
    assert check_memory(HV, {}) == (None, None)  # not reported: nothing to judge


def test_processors_from_inside_the_vm_capped_by_the_host() -> None:
    assert check_processors(HV, "4\r\n", host_processors=8) == (None, 4)
    assert check_processors(HV, "2\r\n", host_processors=2) == (None, 2)
    failure, seen = check_processors(HV, "2\r\n", host_processors=8)
    assert failure is not None
    assert seen == 2
    assert check_processors(HV, "'cmd' is not recognized", 8)[0] is not None


def test_canary_pod_is_named_labelled_and_logged_per_run() -> None:
    config = pod_config(CanarySpec("hv", "HyperV", 60), "run1", r"C:\ProgramData\wcow-agent")
    assert config["metadata"] == {
        "name": "wcow-canary-hv",
        "namespace": "wcow-canary",
        "uid": "run1",
        "attempt": 0,
    }
    assert config["log_directory"] == r"C:\ProgramData\wcow-agent\canary\run1"
    assert config["labels"]["runtime.wcow.dev/canary-run"] == "run1"


@pytest.mark.parametrize(
    ("output", "version"),
    [
        (
            "containerd github.com/containerd/containerd v1.7.20 8fc6bcff5131\n",
            "1.7.20",
        ),
        (
            "containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd\n",
            "2.0.0",
        ),
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", "1.6.20"),
    ],
)
def test_containerd_version_is_read_like_the_binary_prints_it(output: str, version: str) -> None:
    assert parse_containerd_version(output) == version


def test_config_schema_follows_the_containerd_version() -> None:
    assert config_version_for("1.6.20") == 2
    assert config_version_for("1.7.20") == 2
    assert config_version_for("2.0.0") == 3
    assert config_version_for("2.2.1") == 3
    assert config_version_for("2.3.4") == 4


def test_build_is_major_minor_build_without_ubr_like_the_kubelet() -> None:
    assert build_from_registry(10, 0, "20348").label_value == "10.0.20348"


def test_cri_info_conditions_and_handlers() -> None:
    status = parse_info(
        {
            "status": {
                "conditions": [
                    {"type": "RuntimeReady", "status": True},
                    {
                        "type": "NetworkReady",
                        "status": False,
                        "reason": "NetworkPluginNotReady",
                        "message": "cni config uninitialized",
                    },
                ]
            },
            "runtimeHandlers": [{"features": {}}, {"name": "hv", "features": {}}],
        }
    )
    assert status.runtime_ready
    assert not status.network_ready
    assert "cni config uninitialized" in status.message
    assert status.handlers == ("hv",)


def test_a_shim_named_by_runtime_path_owns_its_vm_under_its_own_name() -> None:
    """hcsshim reports its own binary's base name as Owner; containerd launches the file
    runtime_path names, so a renamed shim owns the VM under that name."""
    plain = make_plan(hyperv()).handlers["hv"]
    runtime = {"runtime_path": r"C:\shims\runhcs-v0.12.exe", "runtime_type": "x"}
    spec = CanarySpec.from_plan("hv", plain.model_copy(update={"runtime": runtime}))
    assert spec.shim_owner == "runhcs-v0.12.exe"
    renamed = {**VM, "Owner": "runhcs-v0.12.exe"}
    assert check_isolation(spec, "s", [renamed]) is None
    assert check_isolation(spec, "s", [{**VM, "Owner": "RUNHCS-v0.12.EXE"}]) is None
    failure = check_isolation(spec, "s", [VM])
    assert failure is not None
    assert "not runhcs-v0.12.exe" in failure[1]
    # Without runtime_path the shim is containerd-shim-runhcs-v1.exe, as before.
    assert check_isolation(CanarySpec.from_plan("hv", plain), "s", [VM]) is None
