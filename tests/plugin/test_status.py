"""``kubectl wcow status``: where each profile and node stands, and why, from the objects."""

from __future__ import annotations

import json

from tests.plugin import fixtures
from wcow_contract.v1alpha1 import NodeFailure
from wcow_contract.wire.rollout import Hold, dump_rollout
from wcow_operator.plugin import status, table


def halted_report() -> status.Report:
    return status.report(
        namespace=fixtures.NS,
        profiles=fixtures.profiles(),
        nodes=fixtures.nodes(),
        config_maps=fixtures.maps(fixtures.plan_map(), fixtures.rollout_map()),
    )


def test_each_node_stands_where_the_operator_would_put_it_with_the_reason() -> None:
    where = {n.name: (n.rollout, n.why) for n in halted_report().nodes}
    assert where["w1"] == ("done", "")
    assert where["w2"] == ("failed", "SandboxFailed: hv: hcs said no")
    assert where["w3"] == ("applying", "let in at 2026-11-25T01:01:00Z")
    assert where["w4"] == ("waiting", "the rollout is halted: nobody new is let in")
    assert where["w5"][0] == "no-report"
    assert "no readable agent status" in where["w5"][1]


def test_rollout_progress_is_counted_per_changed_profile_only() -> None:
    by_name = {p.name: p for p in halted_report().profiles}
    assert by_name["hv"].rollout == {"done": 1, "applying": 1, "waiting": 1, "failed": 1}
    assert by_name["proc"].rollout is None  # not in this change
    assert by_name["hv"].failures == [
        {"node": "w2", "reason": "SandboxFailed", "message": "hcs said no"}
    ]
    assert by_name["hv"].rolled_out == "False (RolloutHalted)"


def test_capabilities_and_guest_builds_come_from_the_labels() -> None:
    w1 = next(n for n in halted_report().nodes if n.name == "w1")
    assert w1.guest_builds == ["20348"]
    assert w1.capabilities == {
        "node.runtime.wcow.dev/containerd-line": "1.7",
        "node.runtime.wcow.dev/guest-build-20348": "true",
        "node.runtime.wcow.dev/hyperv": "true",
    }
    assert (w1.hyperv, w1.containerd_line) == ("true", "1.7")
    assert w1.plan == "current"
    assert w1.handlers == {"hv": "Ready", "proc": "Ready"}
    w2 = next(n for n in halted_report().nodes if n.name == "w2")
    assert w2.handlers["hv"] == "Failed/SandboxFailed"
    assert w2.plan == "older"


def test_table_shows_the_halt_how_to_resume_and_every_node_not_done() -> None:
    text = table.render(halted_report())
    assert "HALTED since 2026-11-25T01:02:00Z: NodeFailed" in text
    assert "kubectl annotate wrp hv runtime.wcow.dev/resume-rollout=$(date +%s) --overwrite" in text
    lines = text.splitlines()
    profile = next(line for line in lines if line.startswith("hv "))
    assert profile.split()[:6] == ["hv", "HyperV", "ltsc2022", "hv", "False", "(NodesFailed)"]
    assert "3/4" in profile
    progress = next(line for line in lines if line.startswith("hv ") and line is not profile)
    assert progress.split() == ["hv", "hv", "1", "1", "1", "1"]
    for node in ("w2", "w3", "w4", "w5"):
        assert any(line.startswith(f"{node} ") for line in lines), node
    node_row = next(line for line in lines if line.startswith("w1 ") and "10.0.20348" in line)
    assert node_row.split() == [
        "w1", "10.0.20348", "true", "1.7.20", "1.7", "20348", "current", "hv=Ready", "proc=Ready",
    ]  # fmt: skip


def test_json_carries_the_same_report() -> None:
    document = json.loads(halted_report().as_json())
    assert document["rollout"]["halted"]["reason"] == "NodeFailed"
    assert document["rollout"]["current"] is True
    assert [n["rollout"] for n in document["nodes"]] == [
        "done", "failed", "applying", "waiting", "no-report",
    ]  # fmt: skip


def test_missing_or_broken_configmaps_are_said_not_guessed() -> None:
    report = status.report(
        namespace="elsewhere",
        profiles=[],
        nodes=fixtures.nodes(),
        config_maps=fixtures.maps(
            None, fixtures.config_map("wcow-runtime-rollout", "rollout.json", "{not json")
        ),
    )
    assert report.plan_hash is None
    assert report.rollout is None
    assert report.notes == [
        "no plan ConfigMap in namespace elsewhere: is the operator there?",
        "the rollout ConfigMap is unreadable: no node may change",
    ]
    assert {n.rollout for n in report.nodes} == {"", "no-report"}
    text = table.render(report)
    assert "No WindowsRuntimeProfiles." in text
    assert "note: no plan ConfigMap in namespace elsewhere" in text


def test_a_rollout_for_another_plan_is_not_read_as_this_ones() -> None:
    stale = fixtures.rollout().model_copy(update={"plan_hash": fixtures.OLD})

    report = status.report(
        namespace=fixtures.NS,
        profiles=fixtures.profiles(),
        nodes=fixtures.nodes(),
        config_maps=fixtures.maps(
            fixtures.plan_map(),
            fixtures.config_map("r", "rollout.json", fixtures.dump_rollout(stale)),
        ),
    )
    assert report.rollout is not None
    assert not report.rollout.current
    assert "the operator has not caught up yet" in report.notes[0]
    assert all(n.rollout in ("", "no-report") for n in report.nodes)


def test_a_node_cannot_write_lines_into_the_table() -> None:
    evil = fixtures.agent(
        fixtures.OLD, fixtures.OLD, ("Ready", "CanaryPassed", ""),
        waiting="fine\nw9  done  forged line\x1b[31m",
    )  # fmt: skip
    report = status.report(
        namespace=fixtures.NS,
        profiles=[],
        nodes=[fixtures.node("w4", evil)],
        config_maps=fixtures.maps(
            fixtures.plan_map(),
            fixtures.config_map(
                "r",
                "rollout.json",
                fixtures.dump_rollout(fixtures.rollout().model_copy(update={"halted": None})),
            ),
        ),
    )
    text = table.render(report)
    assert not any(line.startswith("w9") for line in text.splitlines())
    assert "\x1b" not in text


def test_table_and_json_show_a_held_back_profile_and_how_to_send_it_out_again() -> None:
    held = fixtures.rollout().model_copy(
        update={
            "halted": None,
            "held": {
                "proc": Hold(
                    handler="proc",
                    uid="uid-proc",
                    generation=3,
                    plan_hash="sha256:old",
                    reason="NodeFailed",
                    message="the change of handler proc failed on w4 (CanaryFailed)",
                    since="2026-11-25T01:03:00Z",
                    nodes=[NodeFailure(node="w4", reason="CanaryFailed", message="proc: no")],
                )
            },
        }
    )
    maps = fixtures.maps(
        fixtures.plan_map(),
        fixtures.config_map("wcow-runtime-rollout", "rollout.json", dump_rollout(held)),
    )
    report = status.report(
        namespace=fixtures.NS,
        profiles=fixtures.profiles(),
        nodes=fixtures.nodes(),
        config_maps=maps,
    )
    text = table.render(report)
    assert "HALTED" not in text
    line = next(line for line in text.splitlines() if line.startswith("HELD BACK since"))
    assert "profile proc (handler proc, generation 3): NodeFailed:" in line, line
    assert "w4 (CanaryFailed)" in line
    assert "kubectl annotate wrp proc runtime.wcow.dev/resume-rollout" in text
    document = json.loads(report.as_json())
    assert document["rollout"]["held"]["proc"]["nodes"] == "w4"


def test_what_others_wrote_reaches_the_terminal_escaped() -> None:
    """A status, a node's report or an API error written by a tenant or a node cannot send
    the reader's terminal an escape sequence (an OSC 52 clipboard write, say)."""
    from wcow_operator.plugin.cli import terminal_safe

    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \u202eevil\x9b2J\nnext line"
    safe = terminal_safe(hostile)
    assert "\x1b" not in safe
    assert "\x07" not in safe
    assert "\u202e" not in safe
    assert "\x9b" not in safe
    assert "\\x1b]52" in safe
    assert safe.split("\n") == [safe.split("\n")[0], "next line"]  # line breaks kept
