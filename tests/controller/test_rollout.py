"""Paced rollout decisions: a change reaches maxUnavailable nodes at a time, a failure halts
it, a new spec or the resume annotation resumes it, and everything comes from the rollout
ConfigMap and the nodes' reports (so a new leader continues where the last one stopped)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import profile_document
from tests.controller.builders import observed, profile_body
from wcow_contract.conditions import timestamp
from wcow_contract.wire.plan import plan_document
from wcow_contract.wire.rollout import RESUME_ANNOTATION, Rollout, may_change, parse_rollout
from wcow_operator.reconcile.model import ObservedNode, ReconcileSettings
from wcow_operator.reconcile.reconciler import reconcile
from wcow_operator.reconcile.rollout_decision import (
    NodeReport,
    Progress,
    changed_handlers,
    decide,
    next_timeout,
    parse_max_unavailable,
)

NOW = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
TIMEOUT = timedelta(minutes=15)
OLD = plan_document({"hv": {"v": 1}, "proc": {"v": 1}})
NEW = plan_document({"hv": {"v": 2}, "proc": {"v": 1}})


def report(applied: str | None, attempted: str | None = None, hv: str = "Ready") -> NodeReport:
    return NodeReport(applied, attempted or applied, {"hv": (hv, f"R{hv}", f"{hv} message")})


def fleet(count: int, **states: NodeReport) -> dict[str, NodeReport]:
    reports = {f"n{i:02d}": report(OLD["hash"]) for i in range(count)}
    reports.update(states)
    return reports


def step(
    current: Rollout | None,
    reports: dict[str, NodeReport],
    *,
    limit: int | str = 2,
    plan: dict[str, Any] = NEW,
    previous: dict[str, Any] = OLD,
    resume: str = "",
    now: datetime = NOW,
) -> tuple[Rollout, Progress]:
    return decide(
        plan=plan,
        previous_plan=previous,
        current=current,
        reports=reports,
        max_unavailable=lambda _changed: parse_max_unavailable(limit, len(reports)),
        resume_key=resume,
        now=now,
        timeout=TIMEOUT,
    )


def test_what_changed_between_two_plans() -> None:
    assert changed_handlers(OLD, NEW) == {"hv"}
    assert changed_handlers(None, NEW) == {"hv", "proc"}
    assert changed_handlers(NEW, plan_document({"proc": {"v": 1}})) == {"hv"}  # removed


@pytest.mark.parametrize(
    ("value", "nodes", "count"),
    [(3, 100, 3), ("10%", 200, 20), ("10%", 5, 1), ("25%", 10, 3), ("100%", 7, 7), (1, 0, 1)],
)
def test_max_unavailable_counts_and_percentages_round_up(
    value: int | str, nodes: int, count: int
) -> None:
    assert parse_max_unavailable(value, nodes) == count


def test_a_good_change_reaches_every_node_a_few_at_a_time() -> None:
    reports = fleet(5)
    rollout, progress = step(None, reports)
    assert sorted(rollout.permitted) == ["n00", "n01"]
    assert rollout.changed_handlers == ["hv"]
    assert (progress.done, progress.total) == (0, 5)
    waves = 1
    while not progress.complete:
        # Permitted nodes apply the plan and report it; the next ones get permission.
        for name in rollout.permitted:
            reports[name] = report(NEW["hash"])
        rollout, progress = step(rollout, reports)
        busy = [n for n in rollout.permitted if reports[n].applied_plan_hash != NEW["hash"]]
        assert len(busy) <= 2
        waves += 1
    assert waves == 4  # 2 + 2 + 1 nodes, then the last report
    assert progress.halted is None


def test_only_permitted_nodes_may_change_and_only_to_that_plan() -> None:
    rollout, _ = step(None, fleet(3))
    assert may_change(rollout, NEW["hash"], "n00")
    assert not may_change(rollout, NEW["hash"], "n02")
    assert not may_change(rollout, OLD["hash"], "n00")
    assert not may_change(None, NEW["hash"], "n00")
    assert parse_rollout("{not json") is None  # unreadable: nobody may change


def test_a_failure_halts_the_rollout_and_nobody_else_starts() -> None:
    reports = fleet(6)
    rollout, _ = step(None, reports)
    reports["n00"] = report(NEW["hash"])
    reports["n01"] = report(OLD["hash"], attempted=NEW["hash"], hv="Failed")
    rollout, progress = step(rollout, reports)
    assert progress.halted is not None
    assert progress.failures[0].node == "n01"
    assert progress.failures[0].reason == "RFailed"
    assert sorted(rollout.permitted) == ["n00", "n01"]  # no new permission
    assert (progress.done, progress.failed) == (1, 1)
    again, _ = step(rollout, reports, now=NOW + timedelta(minutes=1))
    assert again == rollout  # stays halted; nothing rewritten


def test_a_failure_left_from_the_replaced_plan_does_not_halt_the_new_one() -> None:
    """A node let in for the fixed plan announces the attempt before its handler states are
    fresh: a Failed about an earlier profile generation is not a failure of this plan."""
    fixed = plan_document({"hv": {"generation": 3}, "proc": {"v": 1}})
    stale = NodeReport(
        OLD["hash"], fixed["hash"], {"hv": ("Failed", "SandboxFailed", "old")}, {"hv": 2}
    )
    fresh = NodeReport(
        OLD["hash"], fixed["hash"], {"hv": ("Failed", "SandboxFailed", "new")}, {"hv": 3}
    )
    _, progress = step(None, fleet(3, n00=stale), plan=fixed)
    assert progress.halted is None
    rollout, _ = step(None, fleet(3), plan=fixed)
    _, progress = step(rollout, fleet(3, n00=fresh), plan=fixed)
    assert progress.halted is not None


def test_a_failure_of_a_handler_the_new_plan_removes_does_not_halt_it() -> None:
    """Renaming a failing handler: the new plan drops ``bad`` and adds ``good``. The nodes
    that tried ``bad`` still report it Failed when they start on the new plan; that is not a
    failure of the new plan."""
    bad_plan = plan_document({"bad": {"generation": 2}, "proc": {"v": 1}})
    good_plan = plan_document({"good": {"generation": 3}, "proc": {"v": 1}})
    reports = {f"n{i:02d}": report(OLD["hash"]) for i in range(4)}
    failing = {"bad": ("Failed", "CanaryFailed", "no shim")}
    first, _ = step(None, reports, plan=bad_plan)
    for name in first.permitted:
        reports[name] = NodeReport(OLD["hash"], bad_plan["hash"], failing, {"bad": 2})
    halted, progress = step(first, reports, plan=bad_plan)
    assert progress.halted is not None
    # The fix: a new plan. The first nodes start on it still reporting ``bad`` Failed.
    fixed, progress = step(halted, reports, plan=good_plan, previous=bad_plan)
    assert progress.halted is None
    assert {"bad", "good"} <= set(fixed.changed_handlers)
    for name in fixed.permitted:
        states = {**failing, "good": ("Pending", "", "")}
        reports[name] = NodeReport(OLD["hash"], good_plan["hash"], states, {"bad": 2, "good": 3})
    going, progress = step(fixed, reports, plan=good_plan, previous=bad_plan)
    assert progress.halted is None
    assert progress.applying == 2
    for name in going.permitted:
        states = {"good": ("Ready", "", "")}
        reports[name] = NodeReport(good_plan["hash"], good_plan["hash"], states, {"good": 3})
    after, progress = step(going, reports, plan=good_plan, previous=bad_plan)
    assert progress.halted is None
    assert len(after.permitted) == 4  # the next two let in: it resumes to every node


def test_a_new_spec_starts_a_new_rollout() -> None:
    reports = fleet(4)
    rollout, _ = step(None, reports)
    reports["n00"] = report(OLD["hash"], attempted=NEW["hash"], hv="Failed")
    halted, _ = step(rollout, reports)
    assert halted.halted is not None
    fixed = plan_document({"hv": {"v": 3}, "proc": {"v": 1}})
    resumed, progress = step(halted, reports, plan=fixed)
    assert resumed.plan_hash == fixed["hash"]
    assert progress.halted is None
    assert len(resumed.permitted) == 2


def test_the_resume_annotation_resumes_and_retries_the_failed_node_in_turn() -> None:
    reports = fleet(3)
    rollout, _ = step(None, reports, limit=1)
    reports["n00"] = report(OLD["hash"], attempted=NEW["hash"], hv="Failed")
    halted, _ = step(rollout, reports, limit=1)
    assert halted.halted is not None
    assert step(halted, reports, limit=1)[0].halted is not None  # same key: still halted
    resumed, progress = step(halted, reports, limit=1, resume="hv=1")
    assert progress.halted is None
    assert resumed.resumed_by == "hv=1"
    assert list(resumed.permitted) == ["n00"]  # re-granted first (by name): it retries


def test_a_node_silent_past_the_timeout_fails_the_rollout() -> None:
    reports = fleet(3)
    rollout, _ = step(None, reports, limit=1)
    _, progress = step(rollout, reports, limit=1, now=NOW + TIMEOUT + timedelta(seconds=1))
    assert progress.halted is not None
    assert progress.failures[0].reason == "RolloutTimeout"


def test_a_pass_is_due_when_the_first_permission_times_out_not_at_the_resync() -> None:
    """A node that hangs with its permission says nothing, so no watch event wakes the
    operator: it schedules a pass just past the deadline (tests/faults found the halt
    coming only at the next resync, minutes late)."""
    reports = fleet(3)
    rollout, _ = step(None, reports, limit=2)
    assert next_timeout(rollout, TIMEOUT, NOW) == TIMEOUT.total_seconds() + 1
    later = NOW + timedelta(minutes=10)
    assert next_timeout(rollout, TIMEOUT, later) == 5 * 60 + 1
    past = NOW + TIMEOUT + timedelta(seconds=1)
    halted, progress = step(rollout, reports, limit=2, now=past)
    assert progress.halted is not None
    assert next_timeout(halted, TIMEOUT, past) is None  # halted: nothing more to time out
    assert next_timeout(None, TIMEOUT, NOW) is None


def test_a_deleted_node_frees_its_permission() -> None:
    reports = fleet(3)
    rollout, _ = step(None, reports, limit=1)
    assert list(rollout.permitted) == ["n00"]
    del reports["n00"]
    rollout, progress = step(rollout, reports, limit=1)
    assert list(rollout.permitted) == ["n01"]
    assert progress.halted is None


def test_new_nodes_trying_on_their_own_count_against_the_budget() -> None:
    reports = fleet(4)
    reports["n03"] = report(None, attempted=NEW["hash"], hv="Pending")  # a new node, applying
    rollout, progress = step(None, reports, limit=2)
    assert list(rollout.permitted) == ["n00"]
    assert progress.halted is None


def test_nodes_still_changing_to_an_earlier_plan_count_against_the_budget() -> None:
    """A fix or a resume makes a new plan while nodes apply the last one: they are
    unavailable until their attempt ends, so the new rollout lets in only what is left."""
    earlier = plan_document({"hv": {"v": 3}, "proc": {"v": 1}})
    mid = NodeReport(OLD["hash"], earlier["hash"], {"hv": ("Pending", "Applying", "changing")})
    reports = fleet(5, n03=mid)
    rollout, _ = step(None, reports, limit=2)
    assert list(rollout.permitted) == ["n00"]
    # Its attempt ended (failed, or held back on its next cycle): the slot is free again.
    reports["n03"] = NodeReport(OLD["hash"], earlier["hash"], {"hv": ("Failed", "R", "m")})
    rollout, _ = step(rollout, reports, limit=2)
    assert list(rollout.permitted) == ["n00", "n01"]


def test_a_new_plan_keeps_the_nodes_the_last_rollout_let_in_that_are_not_done() -> None:
    """A fix or a resume replaces a rollout while nodes are let in: one applying, one not
    begun (its agent may start at any moment). Both keep their place, so the new rollout
    lets nobody else in beside them at maxUnavailable 2; a node that failed gives its
    place up."""
    reports = fleet(6)
    rollout, _ = step(None, reports, limit=2)
    assert list(rollout.permitted) == ["n00", "n01"]
    reports["n00"] = report(OLD["hash"], attempted=NEW["hash"], hv="Pending")  # applying
    later = plan_document({"hv": {"v": 3}, "proc": {"v": 1}})
    minute = NOW + timedelta(minutes=1)
    replaced, _ = step(rollout, reports, limit=2, plan=later, previous=NEW, now=minute)
    assert replaced.permitted == rollout.permitted  # the same places, the same grants
    # The applying node failed its change instead: its place is given anew (in name
    # order it is first again, with a new grant); the unbegun one keeps its own.
    reports["n00"] = report(OLD["hash"], attempted=NEW["hash"], hv="Failed")
    replaced, _ = step(rollout, reports, limit=2, plan=later, previous=NEW, now=minute)
    assert replaced.permitted == {"n00": timestamp(minute), "n01": rollout.permitted["n01"]}


def test_a_new_leader_continues_from_the_configmap_alone() -> None:
    reports = fleet(4)
    rollout, _ = step(None, reports)
    text = json.dumps(rollout.model_dump(by_alias=True, mode="json"))
    reports["n00"] = report(NEW["hash"])
    continued, _ = step(parse_rollout(text), reports)
    original, _ = step(rollout, reports)
    assert continued == original


# --- through reconcile: status, conditions, events, the ConfigMap ------------------------

SETTINGS = ReconcileSettings(namespace="wcow-system", max_unavailable=1)


def windows(
    name: str, applied: str | None, attempted: str | None = None, hv: str = "Ready"
) -> ObservedNode:
    status = {
        "hostBuild": "10.0.20348",
        "hypervAvailable": True,
        "appliedPlanHash": applied,
        "attemptedPlanHash": attempted or applied,
        "handlers": {"hv": {"state": hv, "reason": f"R{hv}", "message": f"{hv} on {name}"}},
    }
    labels = {"runtime.wcow.dev/hv": "ready"} if hv == "Ready" else {}
    return ObservedNode(name, labels, json.dumps(status), "10.0.20348")


def test_profile_status_shows_progress_and_a_halt_names_the_node_and_how_to_resume() -> None:
    body = profile_body("hv")
    state = observed(body, nodes=[windows(f"n{i}", None) for i in range(3)])
    first = reconcile(state, SETTINGS, NOW)
    (rollout_write,) = [w for w in first.writes if w.kind == "write-rollout"]
    rollout = parse_rollout(rollout_write.body["data"]["rollout.json"])
    assert rollout is not None
    assert list(rollout.permitted) == ["n0"]
    assert first.statuses["hv"]["rollout"]["progress"] == "0/3"
    plan_cm = next(w for w in first.writes if w.kind == "write-plan").body
    assert plan_cm["metadata"]["annotations"]["runtime.wcow.dev/rollout"] == "paced"

    plan_hash = rollout.plan_hash
    body["status"] = first.statuses["hv"]
    failed = observed(
        body,
        plan_config_map=plan_cm,
        rollout_config_map=rollout_write.body,
        nodes=[
            windows("n0", None, plan_hash, hv="Failed"),
            windows("n1", None),
            windows("n2", None),
        ],
    )
    second = reconcile(failed, SETTINGS, NOW)
    status = second.statuses["hv"]
    assert status["rollout"]["state"] == "Halted"
    rolled = next(c for c in status["conditions"] if c["type"] == "RolledOut")
    assert rolled["reason"] == "RolloutHalted"
    assert "n0 (RFailed)" in rolled["message"]
    assert RESUME_ANNOTATION in rolled["message"]
    assert "RolloutHalted" in [e.reason for e in second.events]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] != "RolloutHalted"  # nodes on the last plan stay ready


def test_a_profile_can_lower_max_unavailable() -> None:
    slow = profile_document("hv", rollout={"maxUnavailable": 1})
    slow["metadata"].update(uid="uid-hv", generation=1, finalizers=["runtime.wcow.dev/cleanup"])
    nodes = [windows(f"n{i}", None) for i in range(10)]
    outcome = reconcile(
        observed(slow, nodes=nodes), ReconcileSettings(namespace="wcow-system"), NOW
    )
    (write,) = [w for w in outcome.writes if w.kind == "write-rollout"]
    rollout = parse_rollout(write.body["data"]["rollout.json"])
    assert rollout is not None
    assert rollout.max_unavailable == 1  # the default 10% of 10 would be 1 too: check 50%
    fast = ReconcileSettings(namespace="wcow-system", max_unavailable="50%")
    outcome = reconcile(observed(slow, nodes=nodes), fast, NOW)
    (write,) = [w for w in outcome.writes if w.kind == "write-rollout"]
    assert len(parse_rollout(write.body["data"]["rollout.json"]).permitted) == 1  # type: ignore[union-attr]


def by_design(applied: str | None, attempted: str) -> NodeReport:
    """A node of another pool: it took the change, and cannot run ``hv`` by what it is."""
    return NodeReport(
        applied,
        attempted,
        {"hv": ("Failed", "GuestBuildUnsupported", "its pause image boots another build")},
    )


def test_a_node_that_cannot_run_the_class_by_design_has_not_failed_the_change() -> None:
    """GuestBuildUnsupported says what the node is, not what the change did: while the node
    is at it, it is applying; once it says it applied the plan, done; nothing halts."""
    rollout, _ = step(None, fleet(4))
    reports = fleet(4, n00=by_design(OLD["hash"], NEW["hash"]))
    rollout, progress = step(rollout, reports)
    assert rollout.halted is None
    assert progress.failed == 0
    assert progress.culprits == {}
    reports["n00"] = by_design(NEW["hash"], NEW["hash"])
    rollout, progress = step(rollout, reports)
    assert rollout.halted is None
    assert progress.done == 1


def test_a_node_that_cannot_run_a_class_keeps_its_place_when_the_plan_changes() -> None:
    """A node let in for the last plan, still at it, keeps its permission in the new one:
    its GuestBuildUnsupported verdict is no failure that would end its attempt."""
    rollout, _ = step(None, fleet(4))
    rollout = rollout.model_copy(update={"permitted": {"n03": timestamp(NOW)}})
    busy = {"n03": by_design(OLD["hash"], NEW["hash"])}
    newer = plan_document({"hv": {"v": 3}, "proc": {"v": 1}})
    rollout, _ = step(rollout, fleet(4, **busy), plan=newer, previous=NEW, limit=1)
    assert list(rollout.permitted) == ["n03"]  # it holds the one place
