"""The paced rollout on the node: the pure gate, one reconcile under each rule, the run loop
against a fake API server, and the simulated host failing a canary."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.state import AgentState, Paths, load_state
from wcow_agent.cycle.decisions import CycleReport
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.rollout_gate import Pace
from wcow_agent.cycle.rollout_verdict import Permission, decide, holds_agent_tables, is_paced
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_agent.simulator.faults import Faults
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.wire.rollout import Halt, Rollout
from wcow_support.health import StepHealth

NODE = "win-1"
NS = "wcow-system"


def rollout_text(plan_hash: str, *nodes: str, granted: str = "T1", halted: bool = False) -> str:
    rollout = Rollout(
        plan_hash=plan_hash,
        changed_handlers=["hv"],
        max_unavailable=1,
        permitted=dict.fromkeys(nodes, granted),
        halted=Halt(reason="NodeFailed", message="win-9 failed", since="T0") if halted else None,
    )
    return rollout.model_dump_json(by_alias=True)


def permission(text: str | None, paced: bool = True) -> Permission:
    return Permission.of(paced, text is not None, text, NS)


def gate(perm: Permission, *, changes: bool = True, holds: bool = True) -> tuple[bool, str]:
    verdict = decide(perm, "sha256:h2", NODE, changes_file=changes, holds_tables=holds)
    return verdict.allowed, verdict.reason


# -- the pure gate -------------------------------------------------------------------


def test_an_unpaced_plan_is_applied_at_once_whatever_the_rollout_says() -> None:
    assert gate(permission(None, paced=False)) == (True, "Unpaced")
    assert gate(permission(rollout_text("sha256:other"), paced=False)) == (True, "Unpaced")


def test_a_paced_change_needs_the_rollout_for_this_plan_naming_this_node() -> None:
    assert gate(permission(rollout_text("sha256:h2", NODE))) == (True, "Permitted")
    assert (
        decide(
            permission(rollout_text("sha256:h2", NODE, granted="T7")),
            "sha256:h2",
            NODE,
            changes_file=True,
            holds_tables=True,
        ).grant
        == "T7"
    )
    assert gate(permission(rollout_text("sha256:h2", "win-2"))) == (False, "WaitingForRollout")
    assert gate(permission(rollout_text("sha256:h1", NODE))) == (False, "WaitingForRollout")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "does not exist"),
        ("not json " + NODE, "unreadable"),
        ('{"schemaVersion": 2, "planHash": "h2", "permitted": {"win-1": "T"}}', "unreadable"),
        ("", "unreadable"),
    ],
)
def test_a_missing_or_unreadable_rollout_lets_nobody_change(text: str | None, why: str) -> None:
    perm = permission(text)
    verdict = decide(perm, "sha256:h2", NODE, changes_file=True, holds_tables=True)
    assert (verdict.allowed, verdict.reason) == (False, "WaitingForRollout")
    assert why in verdict.message


def test_a_plan_that_leaves_the_file_as_it_is_is_adopted_without_permission() -> None:
    assert gate(permission(None), changes=False) == (True, "NoChange")


def test_a_node_without_any_agent_table_takes_the_plan_at_once() -> None:
    assert gate(permission(None), holds=False) == (True, "NewNode")
    # Permission first: its grant is what lets a refused file be tried again.
    assert gate(permission(rollout_text("sha256:h2", NODE)), holds=False) == (True, "Permitted")


def test_the_waiting_message_says_why_and_is_stable() -> None:
    def message(text: str) -> str:
        return decide(
            permission(text), "sha256:h2", NODE, changes_file=True, holds_tables=True
        ).message

    assert "is for plan sha256:h1" in message(rollout_text("sha256:h1", NODE))
    assert "halted (NodeFailed: win-9 failed)" in message(rollout_text("sha256:h2", halted=True))
    assert "not let in yet" in message(rollout_text("sha256:h2", "win-2"))
    # Another node let in: same message, so the Node annotation is not rewritten.
    assert message(rollout_text("sha256:h2", "win-2")) == message(
        rollout_text("sha256:h2", "win-2", "win-3")
    )


def test_the_rollout_view_of_a_node_ignores_other_nodes() -> None:
    mine = permission(rollout_text("sha256:h2", "win-2")).view(NODE)
    assert permission(rollout_text("sha256:h2", "win-2", "win-3")).view(NODE) == mine
    assert permission(rollout_text("sha256:h2", "win-2", NODE)).view(NODE) != mine
    assert permission(rollout_text("sha256:h2", "win-2", halted=True)).view(NODE) != mine
    assert permission(rollout_text("sha256:h3", "win-2")).view(NODE) != mine


def test_holding_agent_tables_ignores_seeded_builtins_and_fresh_adoptions() -> None:
    def result(**fields: Any) -> MergeResult:
        return MergeResult(text="", version=2, **fields)

    seeded = {"runhcs-wcow-process": "seeded"}
    first = result(added=["hv", "runhcs-wcow-process"], owned={"hv": "h", **seeded})
    assert not holds_agent_tables(first, {})
    assert not holds_agent_tables(result(owned=seeded), seeded)
    assert not holds_agent_tables(result(updated=["hv"], owned={"hv": "h"}, adopted={"hv": {}}), {})
    assert holds_agent_tables(result(owned={"hv": "h"}), {"hv": "h"})
    assert holds_agent_tables(result(updated=["hv"], owned={"hv": "h2"}), {"hv": "h"})
    assert holds_agent_tables(result(removed=["hv"]), {"hv": "h"})  # removal is a change too
    assert not holds_agent_tables(result(removed=["runhcs-wcow-process"]), seeded)


def test_the_plan_annotation_and_the_attempt_survive_in_their_formats() -> None:
    assert is_paced({"runtime.wcow.dev/rollout": "paced"})
    assert not is_paced({"runtime.wcow.dev/rollout": "now"})
    assert not is_paced(None)
    state = AgentState(attempted_plan="sha256:h2", attempt_grant="T1", unproven=["hv"])
    state.applied_plan = "sha256:h1"
    assert AgentState.from_json(state.to_json()) == state
    assert AgentState.from_json('{"attempt": {"plan": 3, "unproven": "hv"}}') == AgentState()


# -- one reconcile under each rule ---------------------------------------------------

PLAN_1 = make_plan(hyperv())
PLAN_2 = make_plan(hyperv(vm={"processorCount": 2, "memoryMB": 4096}), process())
H1, H2 = PLAN_1.hash, PLAN_2.hash


class Announcements:
    """The pace's announce: what was recorded, and how many restarts had happened then."""

    def __init__(self, node: FakeNode, answer: bool = True) -> None:
        self.node = node
        self.answer = answer
        self.seen: list[tuple[str | None, str | None, int]] = []

    def __call__(self, notice: CycleReport) -> bool:
        self.seen.append(
            (notice.attempted_plan_hash, notice.applied_plan_hash, len(self.node.restarts))
        )
        return self.answer


def applied_once(node: FakeNode) -> NodeAgent:
    agent = node.agent()
    report = agent.reconcile(PLAN_1)
    assert (report.result, report.applied_plan_hash, report.attempted_plan_hash) == (
        "applied",
        H1,
        H1,
    )
    return agent


def states(report: CycleReport) -> dict[str, tuple[str, str]]:
    return {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()}


def test_not_permitted_writes_nothing_restarts_nothing_and_keeps_ready(node: FakeNode) -> None:
    agent = applied_once(node)
    before, restarts = node.disk_text(), len(node.restarts)
    told = Announcements(node)

    report = agent.reconcile(PLAN_2, pace=Pace(permission(rollout_text(H2, "win-2")), NODE, told))

    assert report.result == "waiting"
    assert (node.disk_text(), len(node.restarts)) == (before, restarts)
    assert told.seen == []
    # hv stays Ready on its earlier table (its label stays); proc is not there yet.
    assert states(report) == {
        "hv": ("Ready", "WaitingForRollout"),
        "proc": ("Pending", "WaitingForRollout"),
    }
    assert report.waiting is not None
    assert "not let in yet" in report.waiting
    assert (report.applied_plan_hash, report.attempted_plan_hash) == (H1, H1)


def test_permitted_records_the_attempt_before_the_restart_then_applies(node: FakeNode) -> None:
    agent = applied_once(node)
    restarts = len(node.restarts)
    told = Announcements(node)

    report = agent.reconcile(PLAN_2, pace=Pace(permission(rollout_text(H2, NODE)), NODE, told))

    assert told.seen == [(H2, H1, restarts)], "attempt recorded before containerd restarted"
    assert report.result == "applied"
    assert len(node.restarts) == restarts + 1
    assert states(report) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert (report.applied_plan_hash, report.attempted_plan_hash, report.waiting) == (H2, H2, None)


def test_an_attempt_that_cannot_be_recorded_is_not_begun(node: FakeNode) -> None:
    agent = applied_once(node)
    before = node.disk_text()
    pace = Pace(permission(rollout_text(H2, NODE)), NODE, Announcements(node, answer=False))

    report = agent.reconcile(PLAN_2, pace=pace)

    assert (report.result, node.disk_text(), report.requeue) == ("waiting", before, True)
    assert report.waiting is not None
    assert "could not be recorded" in report.waiting
    assert report.attempted_plan_hash == H1


def test_a_change_that_leaves_config_toml_alone_is_adopted_without_permission(
    node: FakeNode,
) -> None:
    agent = applied_once(node)
    before, restarts = node.disk_text(), len(node.restarts)
    # A guest build newer than this host: NotEligible here, so nothing to write.
    plan = make_plan(hyperv(), hyperv("hv25", windowsBuild="ltsc2025"))
    told = Announcements(node)

    report = agent.reconcile(plan, pace=Pace(permission(None), NODE, told))

    assert report.result == "unchanged"
    assert (node.disk_text(), len(node.restarts), told.seen) == (before, restarts, [])
    assert states(report)["hv25"][0] == "NotEligible"
    assert (report.applied_plan_hash, report.attempted_plan_hash) == (plan.hash, plan.hash)


def test_a_new_node_takes_the_current_plan_at_once(node: FakeNode) -> None:
    told = Announcements(node)
    report = node.agent().reconcile(PLAN_2, pace=Pace(permission(None), NODE, told))

    assert report.result == "applied"
    assert told.seen == [(H2, None, 0)]
    assert report.applied_plan_hash == H2


def test_an_unpaced_plan_is_applied_at_once_by_a_node_with_tables(node: FakeNode) -> None:
    agent = applied_once(node)
    told = Announcements(node)
    report = agent.reconcile(
        PLAN_2, pace=Pace(permission(rollout_text(H2, "win-2"), paced=False), NODE, told)
    )
    assert report.result == "applied"
    assert told.seen == [], "an unpaced change is reported once, after the cycle"
    assert report.applied_plan_hash == H2


def test_an_unreadable_rollout_keeps_a_node_with_tables_as_it_is(node: FakeNode) -> None:
    agent = applied_once(node)
    before = node.disk_text()
    garbage = Pace(permission('{"planHash": "' + H2 + '", "permitted": {"win-1": 1}}'), NODE)
    report = agent.reconcile(PLAN_2, pace=garbage)
    assert (report.result, node.disk_text()) == ("waiting", before)


def test_a_refused_file_is_tried_again_only_under_a_new_grant(node: FakeNode) -> None:
    agent = applied_once(node)
    node.faults.refuse = lambda text: "bad VM" if text and "4096" in text else None
    first = Pace(permission(rollout_text(H2, NODE, granted="T1")), NODE)

    report = agent.reconcile(PLAN_2, pace=first)
    assert report.result == "rolled_back"
    assert (report.applied_plan_hash, report.attempted_plan_hash) == (H1, H2)
    assert states(report)["hv"] == ("Failed", "ContainerdRolledBack")
    restarts = len(node.restarts)

    # Same permission: not again (no restart), the failure stands.
    again = agent.reconcile(PLAN_2, pace=first)
    assert (again.result, len(node.restarts)) == ("rejected", restarts)
    assert states(again)["hv"] == ("Failed", "ConfigRejectedBefore")
    assert (again.applied_plan_hash, again.attempted_plan_hash) == (H1, H2)

    # The operator resumed (dropped and granted again): one more try, which now works.
    node.faults.refuse = lambda text: None
    regrant = Pace(permission(rollout_text(H2, NODE, granted="T9")), NODE)
    retried = agent.reconcile(PLAN_2, pace=regrant)
    assert retried.result == "applied"
    assert len(node.restarts) == restarts + 1
    assert (retried.applied_plan_hash, retried.attempted_plan_hash) == (H2, H2)


# -- the run loop ----------------------------------------------------------------------


def make_loop(node: FakeNode, cluster: FakeCluster) -> AgentLoop:
    return AgentLoop(
        node.agent(),
        cluster,
        RunOptions(node_name=NODE),
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
        now=lambda: "2026-03-02T10:00:00Z",
    )


def test_loop_waits_for_permission_then_records_the_attempt_before_restarting(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(PLAN_1)
    loop = make_loop(node, cluster)
    loop.cycle()
    assert cluster.labels.get("runtime.wcow.dev/hv") == "ready"

    loop.on_plan(cluster.set_plan(PLAN_2, paced=True))
    loop.on_rollout(cluster.set_rollout(rollout_text(H2, "win-2")))
    loop.wake.clear()
    restarts = len(node.restarts)
    loop.cycle()

    assert len(node.restarts) == restarts, "no permission, no restart"
    assert cluster.labels.get("runtime.wcow.dev/hv") == "ready", "stays Ready on the old table"
    status = cluster.status
    assert (status["appliedPlanHash"], status["attemptedPlanHash"]) == (H1, H1)
    assert "not let in yet" in status["waiting"]
    assert status["handlers"]["proc"]["state"] == "Pending"
    assert loop.metrics.registry.get_sample_value("wcow_agent_rollout_waiting") == 1.0

    # Another node let in: nothing for this one, no cycle.
    loop.on_rollout(cluster.set_rollout(rollout_text(H2, "win-2", "win-3")))
    assert not loop.wake.is_set()
    # This node let in: the loop wakes; the attempt reaches the Node before the restart.
    seen: list[tuple[dict[str, Any], int]] = []
    patch = cluster.patch_node

    def recording(name: str, labels: Any, annotations: Any) -> None:
        text = annotations.get("runtime.wcow.dev/agent-status")
        seen.append((json.loads(text) if text else {}, len(node.restarts)))
        patch(name, labels, annotations)

    cluster.patch_node = recording  # type: ignore[method-assign]
    loop.on_rollout(cluster.set_rollout(rollout_text(H2, "win-2", NODE)))
    assert loop.wake.is_set()
    loop.cycle()

    (announced, restarts_then), (final, _) = seen
    assert (announced["attemptedPlanHash"], announced["appliedPlanHash"]) == (H2, H1)
    assert "waiting" not in announced
    # What the attempt changes is Pending: an earlier result (here Ready on the old table; a
    # failure of an earlier plan alike) must not be read as this attempt's.
    assert {h: (e["state"], e["reason"]) for h, e in announced["handlers"].items()} == {
        "hv": ("Pending", "Applying"),
        "proc": ("Pending", "Applying"),
    }
    assert restarts_then == restarts
    assert len(node.restarts) == restarts + 1
    assert (final["attemptedPlanHash"], final["appliedPlanHash"]) == (H2, H2)
    assert "waiting" not in final
    assert cluster.labels.get("runtime.wcow.dev/proc") == "ready"
    assert loop.metrics.registry.get_sample_value("wcow_agent_rollout_waiting") == 0.0


def test_loop_reads_the_rollout_only_for_a_paced_plan(node: FakeNode, cluster: FakeCluster) -> None:
    cluster.set_plan(PLAN_1)
    loop = make_loop(node, cluster)
    loop.cycle()
    assert cluster.rollout_reads == 0
    loop.on_plan(cluster.set_plan(PLAN_2, paced=True))
    loop.cycle()  # a node with tables, no rollout ConfigMap: waits
    assert cluster.rollout_reads == 1
    assert "does not exist" in cluster.status["waiting"]


# -- the simulated host ------------------------------------------------------------------


def test_simulated_canary_failure_leaves_applied_old_and_attempted_new(tmp_path: Path) -> None:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings())
    agent = NodeAgent(
        node.host(),
        Paths(node.config),
        log_root=str(node.root / "logs"),
        timeouts=Timeouts(restart=5.0, cri_poll=0.01),
    )
    assert agent.reconcile(PLAN_1).applied_plan_hash == H1
    node.faults = Faults(canary_fail={"hv"})
    pace = Pace(permission(rollout_text(H2, "sim-1")), "sim-1")

    failed = agent.reconcile(PLAN_2, pace=pace)
    assert failed.result == "applied"  # the file came up; the canary did not pass
    assert states(failed)["hv"][0] == "Failed"
    assert (failed.applied_plan_hash, failed.attempted_plan_hash) == (H1, H2)
    restarts = node.restarts

    # The next cycle under the same permission restarts nothing and still says so.
    again = agent.reconcile(PLAN_2, pace=pace)
    assert node.restarts == restarts
    assert (again.applied_plan_hash, again.attempted_plan_hash) == (H1, H2)
    assert load_state(Paths(node.config).state)[0].unproven == ["hv"]

    # The fault repaired: the canary, rerun as every cycle does for a failed one, passes.
    node.faults = Faults()
    healed = agent.reconcile(PLAN_2, pace=pace)
    assert states(healed)["hv"] == ("Ready", "CanaryPassed")
    assert (healed.applied_plan_hash, healed.attempted_plan_hash) == (H2, H2)
