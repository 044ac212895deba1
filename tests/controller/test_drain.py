"""Drain before a restart: the pure decisions, with no cluster.

Who drains, when a node moves from draining to permitted, when a drain times out, which pods
leave, and which nodes are uncordoned; the end-to-end behaviour on a real API server is in
tests/fleet/test_fleet_drain.py.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from tests.conftest import profile_document
from tests.controller.builders import observed, profile_body
from tests.controller.test_rollout import NEW, NOW, OLD, TIMEOUT, fleet, report, windows
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import LabelSelector
from wcow_contract.wire.rollout import Rollout, dump_rollout, parse_rollout
from wcow_operator.reconcile.drain import (
    DrainOrder,
    DrainProgress,
    ProfileDrain,
    drain_order,
    pods_to_evict,
    selects,
    to_uncordon,
    waiting_for,
)
from wcow_operator.reconcile.model import ReconcileSettings
from wcow_operator.reconcile.reconciler import reconcile
from wcow_operator.reconcile.rollout_decision import (
    NodeReport,
    Progress,
    decide,
    parse_max_unavailable,
)

CORDON = DrainOrder(mode="Cordon")


def step(
    current: Rollout | None,
    reports: dict[str, NodeReport],
    *,
    order: DrainOrder = CORDON,
    drains: dict[str, DrainProgress] | None = None,
    now: object = NOW,
    resume: str = "",
) -> tuple[Rollout, Progress]:
    return decide(
        plan=NEW,
        previous_plan=OLD,
        current=current,
        reports=reports,
        max_unavailable=lambda _changed: parse_max_unavailable(2, len(reports)),
        resume_key=resume,
        now=now,  # type: ignore[arg-type]
        timeout=TIMEOUT,
        drain=lambda _changed: order,
        drains=drains or {},
    )


def test_the_strongest_drain_wins_and_only_evicting_profiles_pods_leave() -> None:
    web = LabelSelector.model_validate({"matchLabels": {"app": "web"}})
    order = drain_order(
        [
            ProfileDrain("hv", "Evict", 120, web),
            ProfileDrain("proc", "Cordon"),
            ProfileDrain("plain", None),  # the operator's default
        ],
        default="None",
    )
    assert order.mode == "Evict"
    assert order.timeout == timedelta(seconds=120)
    assert dict(order.evict) == {"hv": web}  # Cordon's pods stay
    assert drain_order([ProfileDrain("a", None), ProfileDrain("b", "Cordon")], "None").mode == (
        "Cordon"
    )
    assert drain_order([ProfileDrain("a", None)], "Evict").evict == {"a": None}
    assert drain_order([], "Evict").mode == "None"  # nothing changed: nothing to drain
    # A deleted profile's handler leaves the plan: the operator's default drains for it.
    removed = drain_order([ProfileDrain("a", "None")], "Cordon", unclaimed=True)
    assert removed.mode == "Cordon"
    longest = drain_order([ProfileDrain("a", "Evict", 60), ProfileDrain("b", "Evict")], "None")
    assert longest.timeout == timedelta(seconds=600)  # b's default 600 outlasts a's 60


def test_a_node_drains_before_it_is_permitted_and_counts_as_busy() -> None:
    reports = fleet(5)
    rollout, _ = step(None, reports)
    assert rollout.permitted == {}
    assert sorted(rollout.draining) == ["n00", "n01"]  # maxUnavailable 2, draining first
    # Not drained yet: nobody else is let in, nobody may change.
    again, _ = step(rollout, reports, drains={"n00": DrainProgress(False, "2 pods")})
    assert again == rollout
    # n00 drained: it is permitted; n01 still draining; no third node (both busy).
    drained = {"n00": DrainProgress(True), "n01": DrainProgress(False, "1 pod")}
    rollout, _ = step(rollout, reports, drains=drained)
    assert list(rollout.permitted) == ["n00"]
    assert list(rollout.draining) == ["n01"]
    # n00 applies: its slot goes to n02, which drains first too.
    reports["n00"] = report(NEW["hash"])
    rollout, progress = step(rollout, reports, drains=drained)
    assert sorted(rollout.draining) == ["n01", "n02"]
    assert progress.done == 1


def test_a_drain_past_its_timeout_fails_the_node_and_halts_the_rollout() -> None:
    reports = fleet(4)
    order = DrainOrder(mode="Evict", timeout=timedelta(seconds=60), evict={"hv": None})
    rollout, _ = step(None, reports, order=order)
    blocked = {"n00": DrainProgress(False, "1 pod(s) still on the node: ns/web-0")}
    later = NOW + timedelta(seconds=61)
    rollout, progress = step(rollout, reports, order=order, drains=blocked, now=later)
    assert progress.halted is not None
    failure = next(f for f in progress.failures if f.node == "n00")
    assert failure.reason == "DrainTimeout"
    assert "not drained within 60 s: 1 pod(s) still on the node: ns/web-0" in failure.message
    assert "n00 (DrainTimeout)" in progress.halted.message
    assert rollout.permitted == {}
    assert rollout.draining == {}  # halted: the drained nodes are let go (uncordoned)
    # Resumed: the node drains again, from the start.
    resumed, _ = step(rollout, reports, order=order, now=later, resume="hv=1")
    assert resumed.halted is None
    assert sorted(resumed.draining) == ["n00", "n01"]


def test_with_drain_none_nodes_are_permitted_at_once_as_before() -> None:
    reports = fleet(3)
    rollout, _ = step(None, reports, order=DrainOrder(mode="None"))
    assert sorted(rollout.permitted) == ["n00", "n01"]
    assert rollout.draining == {}
    assert "draining" not in dump_rollout(rollout)  # the released bytes
    # A drain left from a setting changed since: let in at once.
    left = Rollout(
        plan_hash=NEW["hash"], changed_handlers=["hv"], max_unavailable=2, draining={"n02": "x"}
    )
    rollout, _ = step(left, reports, order=DrainOrder(mode="None"))
    assert "n02" in rollout.permitted


def test_the_rollout_carries_draining_nodes_and_old_readers_ignore_them() -> None:
    rollout = Rollout(
        plan_hash="sha256:x", max_unavailable=1, draining={"n1": "2026-11-23T08:00:00Z"}
    )
    text = dump_rollout(rollout)
    assert '"draining":{"n1":"2026-11-23T08:00:00Z"}' in text
    assert parse_rollout(text) == rollout
    assert parse_rollout(text.replace('"draining"', '"futureField"')) is not None


def test_only_the_nodes_we_cordoned_and_no_longer_busy_are_uncordoned() -> None:
    busy = {"applying"}
    assert to_uncordon(
        ["applying", "done", "draining", "halted"],
        draining={"draining": "t"},
        permitted={"applying": "t", "done": "t"},
        busy=lambda n: n in busy,
    ) == ["done", "halted"]


def test_uncordon_follows_reports_through_reconcile() -> None:
    body = profile_body("hv", rollout={"drain": "Cordon"})
    nodes = [windows(f"n{i}", None) for i in range(3)]
    state = dataclasses.replace(
        observed(body, nodes=nodes), cordoned=frozenset({"n2"})
    )  # n2: cordoned by us earlier, not part of this change's turn any more
    outcome = reconcile(state, ReconcileSettings(namespace="wcow-system", max_unavailable=1), NOW)
    assert outcome.drain is not None
    assert outcome.drain.order.mode == "Cordon"
    assert outcome.drain.drain == ("n0",)
    assert outcome.drain.uncordon == ("n2",)


def test_the_operator_default_applies_where_the_profile_says_nothing() -> None:
    body = profile_body("hv")
    state = observed(body, nodes=[windows("n0", None)])
    plain = reconcile(state, ReconcileSettings(namespace="wcow-system"), NOW)
    assert plain.drain is not None
    assert plain.drain.order.mode == "None"
    assert plain.drain.drain == ()
    evict = reconcile(state, ReconcileSettings(namespace="wcow-system", drain="Evict"), NOW)
    assert evict.drain is not None
    assert evict.drain.order.mode == "Evict"
    assert dict(evict.drain.order.evict) == {"hv": None}


def pod(name: str, runtime_class: str | None, phase: str = "Running", **labels: str) -> dict:  # type: ignore[type-arg]
    return {
        "metadata": {"namespace": "apps", "name": name, "labels": labels},
        "spec": {"runtimeClassName": runtime_class} if runtime_class else {},
        "status": {"phase": phase},
    }


def test_only_running_pods_of_evicting_classes_matching_the_selector_leave() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"tier": "web"},
            "matchExpressions": [{"key": "keep", "operator": "DoesNotExist"}],
        }
    )
    order = DrainOrder(mode="Evict", evict={"hv": selector, "proc": None})
    pods = [
        pod("web", "hv", tier="web"),
        pod("kept", "hv", tier="web", keep="yes"),
        pod("db", "hv", tier="db"),
        pod("done", "hv", phase="Succeeded", tier="web"),
        pod("any", "proc"),
        pod("linuxish", None),
        pod("other", "gvisor"),
    ]
    assert [p["metadata"]["name"] for p in pods_to_evict(pods, order)] == ["web", "any"]


@pytest.mark.parametrize(
    ("expression", "labels", "expected"),
    [
        ({"key": "a", "operator": "In", "values": ["1", "2"]}, {"a": "2"}, True),
        ({"key": "a", "operator": "In", "values": ["1"]}, {}, False),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {}, True),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {"a": "1"}, False),
        ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
        ({"key": "a", "operator": "DoesNotExist"}, {"a": ""}, False),
    ],
)
def test_label_selectors_match_as_kubernetes_does(
    expression: dict[str, object], labels: dict[str, str], expected: bool
) -> None:
    selector = LabelSelector.model_validate({"matchExpressions": [expression]})
    assert selects(selector, labels) is expected
    assert selects(None, labels) is True


def test_bad_drain_settings_are_refused_naming_the_field() -> None:
    for rollout, words in (
        ({"drain": "Delete"}, "spec.rollout.drain: Input should be 'None', 'Cordon' or 'Evict'"),
        ({"drainTimeoutSeconds": 5}, "spec.rollout.drainTimeoutSeconds: "),
        ({"drainTimeoutSeconds": 10**9}, "spec.rollout.drainTimeoutSeconds: "),
        (
            {"evictPodSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "spec.rollout.evictPodSelector.matchExpressions[0].values: operator In needs",
        ),
        (
            {"evictPodSelector": {"matchLabels": {"bad key!": "x"}}},
            "spec.rollout.evictPodSelector.matchLabels[bad key!]: invalid label key",
        ),
    ):
        with pytest.raises(ProfileInvalidError) as refused:
            parse_profile(profile_document("hv", rollout=rollout))
        assert any(str(p).startswith(words) for p in refused.value.problems), refused.value


def test_the_timeout_message_names_the_pods_and_the_budget() -> None:
    pods = [f"apps/web-{i}" for i in range(7)]
    text = waiting_for(pods, ["apps/web-0: Cannot evict pod ... budget web-pdb needs 2"])
    assert text.startswith("7 pod(s) still on the node: apps/web-0, ")
    assert "and 2 more" in text
    assert "web-pdb" in text


def test_a_profile_asking_to_evict_is_not_valid_where_eviction_is_not_allowed() -> None:
    """An operator without --allow-evict cannot list pods: a profile that asks for Evict is
    refused naming the field, and its last good RuntimeClass and plan entry stay."""
    body = profile_body("hv", rollout={"drain": "Evict"})
    state = observed(body, nodes=[windows("n0", None)])
    refused = reconcile(state, ReconcileSettings(namespace="wcow-system", allow_evict=False), NOW)
    valid = next(c for c in refused.statuses["hv"]["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
    assert "spec.rollout.drain" in valid["message"]
    assert "--allow-evict" in valid["message"]
    assert "hv" not in refused.plan["handlers"]
    allowed = reconcile(state, ReconcileSettings(namespace="wcow-system", allow_evict=True), NOW)
    assert "hv" in allowed.plan["handlers"]
