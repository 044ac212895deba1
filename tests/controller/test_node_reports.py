"""A node's report is checked against the node.

A compromised node (or a thief of the agent's token) writes its own agent-status
annotation and ready labels. The operator recomputes whether the node can run each handler
from the kubelet's build label and the agent's Hyper-V report, and counts a node that
claims what it cannot run as ReportInconsistent, neither eligible nor ready; and no text a
node writes reaches a profile's status unescaped or as a line about another node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.controller.builders import observed, profile_body, windows_node
from tests.controller.test_reconcile import condition, run
from wcow_contract.text import printable
from wcow_contract.wire.agent_status import AgentStatus, HandlerStatus, parse_agent_status
from wcow_operator.reconcile.model import ObservedNode, Outcome

LTSC2022 = "10.0.20348"
LTSC2019 = "10.0.17763"


def plan_hash(*bodies: dict[str, Any]) -> str:
    """The hash of the plan the operator writes for these profiles."""
    plan = run(observed(*bodies)).plan
    return str(plan["hash"])


def reconcile_with(body: dict[str, Any], *nodes: ObservedNode) -> Outcome:
    return run(observed(body, nodes=list(nodes)))


def test_a_host_without_hyperv_and_too_old_that_claims_ready_is_not_counted() -> None:
    """The issue's node: 10.0.17763, no Hyper-V, reports Ready for an ltsc2022 Hyper-V
    handler and labels itself ready."""
    body = profile_body("hv")  # HyperV, windowsBuild ltsc2022
    current = plan_hash(body)
    liar = windows_node(
        "liar",
        {"hv": ("Ready", "CanaryPassed")},
        ready=("hv",),
        build=LTSC2019,
        hyperv=False,
        applied=current,
    )
    honest = windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",), applied=current)

    outcome = reconcile_with(body, liar, honest)

    status = outcome.statuses["hv"]
    assert status["nodes"] == {"eligible": 1, "ready": 1, "failed": 0}
    (failure,) = status["failures"]
    assert failure["node"] == "liar"
    assert failure["reason"] == "ReportInconsistent"
    assert "10.0.17763 host without Hyper-V" in failure["message"]
    assert "HyperVUnavailable" in failure["message"]
    message = condition(outcome, "hv", "NodesReady")["message"]
    assert "1/1 eligible Windows nodes ready" in message
    assert "1 Windows nodes report that they can run it" in message
    assert "ReportInconsistent" in message


@pytest.mark.parametrize(
    ("spec", "build", "hyperv", "why"),
    [
        ({}, LTSC2019, True, "HostBuildTooOld"),  # Hyper-V, but the guest is newer
        ({"isolation": "Process", "windowsBuild": "ltsc2019"}, LTSC2022, True, "Process"),
        ({"windowsBuild": "ltsc2019"}, LTSC2022, False, "HyperVUnavailable"),
    ],
    ids=["guest-newer-than-host", "process-build-mismatch", "no-hyperv"],
)
def test_each_impossible_claim_is_named(
    spec: dict[str, Any], build: str, hyperv: bool, why: str
) -> None:
    body = profile_body("hv", **spec)
    node = windows_node(
        "n1",
        {"hv": ("Failed", "CanaryTimeout")},
        build=build,
        hyperv=hyperv,
        applied=plan_hash(body),
    )

    status = reconcile_with(body, node).statuses["hv"]

    assert status["nodes"] == {"eligible": 0, "ready": 0, "failed": 0}
    assert status["failures"][0]["reason"] == "ReportInconsistent"
    assert why in status["failures"][0]["message"]


def test_an_agent_that_reports_another_build_than_its_kubelet_is_not_believed() -> None:
    body = profile_body("hv")
    node = windows_node(
        "n1",
        {"hv": ("Ready", "CanaryPassed")},
        ready=("hv",),
        build=LTSC2019,
        reported_build=LTSC2022,
    )

    status = reconcile_with(body, node).statuses["hv"]

    assert status["nodes"]["ready"] == 0
    assert status["failures"] == [
        {
            "node": "n1",
            "reason": "ReportInconsistent",
            "message": "its agent reports host build 10.0.20348, its kubelet labels it "
            "node.kubernetes.io/windows-build=10.0.17763",
        }
    ]


def test_a_node_without_the_kubelets_build_label_cannot_vouch_for_itself() -> None:
    node = windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",), build=None)
    status = reconcile_with(profile_body("hv"), node).statuses["hv"]
    assert status["nodes"]["ready"] == 0
    assert "no valid node.kubernetes.io/windows-build label" in status["failures"][0]["message"]


def test_honest_nodes_and_nodes_still_on_an_older_plan_are_counted_as_before() -> None:
    """A 17763 node that says NotEligible is simply not eligible; one that has not reached
    the current plan (a paced rollout) is judged when it does, not before."""
    body = profile_body("hv")
    current = plan_hash(body)
    nodes = [
        windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",), applied=current),
        windows_node("n2", {"hv": ("NotEligible", "HostBuildTooOld")}, build=LTSC2019),
        windows_node(
            "n3",
            {"hv": ("Ready", "CanaryPassed")},
            ready=("hv",),
            build=LTSC2019,
            applied="sha256:" + "0" * 64,
        ),
    ]

    status = reconcile_with(body, *nodes).statuses["hv"]

    assert status["nodes"] == {"eligible": 2, "ready": 2, "failed": 0}
    assert status["failures"] == []


# -- what a node writes, and what reaches the profile's status -----------------------------

HOSTILE = (
    "canary failed\n"
    "- node: n2\n  reason: ContainerdRolledBack\n"  # looks like another node's failure
    "\x1b[2J\x1b[31mn3: ConfigRejected\x1b[0m\r\u2028\u202e"
)


def test_hostile_text_in_a_report_is_escaped_in_the_profiles_status() -> None:
    body = profile_body("hv")
    report = {
        "hostBuild": LTSC2022,
        "hypervAvailable": True,
        "appliedPlanHash": plan_hash(body),
        "handlers": {"hv": {"state": "Failed", "reason": "CanaryFailed", "message": HOSTILE}},
    }
    node = ObservedNode("n1", {}, json.dumps(report), LTSC2022)

    outcome = reconcile_with(body, node)

    (failure,) = outcome.statuses["hv"]["failures"]
    assert failure["node"] == "n1"
    assert failure["message"].isprintable()
    assert "\\n- node: n2\\n  reason: ContainerdRolledBack" in failure["message"]
    assert "\\x1b[2J" in failure["message"]
    for item in outcome.statuses["hv"]["conditions"]:
        assert item["message"].isprintable(), item
        assert "n2" not in item["message"], item
        assert "n3" not in item["message"], item


@pytest.mark.parametrize(
    "reason",
    [
        "Failed\nn2: ContainerdRolledBack",
        "CanaryFailed, n2: ContainerdRolledBack",
        "canaryFailed",
        "Canary Failed",
        "X" * 65,
        "\x1b[2JFailed",
    ],
)
def test_a_report_whose_reason_is_not_camel_case_is_not_read_at_all(reason: str) -> None:
    body = profile_body("hv")
    report = {
        "hostBuild": LTSC2022,
        "hypervAvailable": True,
        "handlers": {"hv": {"state": "Failed", "reason": reason, "message": "m"}},
    }
    node = ObservedNode("n1", {"runtime.wcow.dev/hv": "ready"}, json.dumps(report), LTSC2022)

    assert parse_agent_status(json.dumps(report)) is None
    outcome = reconcile_with(body, node)

    status = outcome.statuses["hv"]
    assert status["nodes"] == {"eligible": 0, "ready": 0, "failed": 0}
    assert status["failures"] == []
    message = condition(outcome, "hv", "NodesReady")["message"]
    assert "1 Windows nodes report no agent status yet" in message
    assert "n2" not in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hostBuild", "10.0.20348\n"),
        ("hostBuild", "ltsc2022"),
        ("handlers", {"Bad_Handler": {"state": "Ready", "reason": "CanaryPassed"}}),
        ("handlers", {"hv\nn2": {"state": "Ready", "reason": "CanaryPassed"}}),
    ],
)
def test_the_model_refuses_what_a_node_cannot_truthfully_say(field: str, value: Any) -> None:
    report: dict[str, Any] = {"hostBuild": LTSC2022, "hypervAvailable": True, field: value}
    with pytest.raises(ValidationError):
        AgentStatus.model_validate(report)


def test_free_text_is_escaped_and_bounded_on_both_sides() -> None:
    """The agent's own status is built through the same model, so a containerd error with
    newlines is escaped before it is written, and read back unchanged."""
    status = AgentStatus(
        host_build=LTSC2022,
        hyperv_available=True,
        containerd_version="1.7.20\n",
        waiting="wait\nfor\x00me",
        handlers={"hv": HandlerStatus(state="Failed", reason="CanaryFailed", message=HOSTILE)},
    )
    text = status.model_dump_json(by_alias=True)
    again = parse_agent_status(text)
    assert again == status
    assert status.waiting == "wait\\nfor\\x00me"
    assert status.containerd_version == "1.7.20\\n"
    assert status.handlers["hv"].message.isprintable()
    long = HandlerStatus(state="Failed", reason="CanaryFailed", message="\n" * 5000)
    assert len(long.message) == 1024


@settings(max_examples=300, deadline=None)
@given(text=st.text(), limit=st.integers(0, 200))
def test_printable_is_printable_bounded_and_idempotent(text: str, limit: int) -> None:
    once = printable(text, limit)
    assert once.isprintable()
    assert len(once) <= limit
    assert printable(once, limit) == once
    if text.isprintable() and len(text) <= limit:
        assert once == text
