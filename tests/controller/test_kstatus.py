"""kstatus (tests/kstatus.py: cli-utils' rules, copied with their source) applied to every
state the reconcile core can produce: what Flux's `wait: true` makes of a profile.

Each scenario is driven through the pure reconcile with the writes applied, as the API server
would store them; the profile object that results is judged by kstatus, and its conditions
are held to the catalogue the docs' tables are rendered from (wcow_contract.condition_table).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.controller.builders import NAMESPACE, observed, profile_body
from tests.controller.test_reconcile import apply
from tests.kstatus import RULES, compute
from wcow_contract.condition_table import CONDITIONS, STALLING, UNDER_WAY
from wcow_contract.plan import PLAN_KEY
from wcow_operator.reconcile.core import ReconcileSettings, reconcile, runtime_class_failed
from wcow_operator.reconcile.model import Observed, ObservedNode

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = ReconcileSettings(namespace=NAMESPACE, max_unavailable=1)
Body = dict[str, Any]


def node(name: str, applied: str | None, attempted: str | None = None, hv: str = "Ready") -> Any:
    status = {
        "schemaVersion": 1,
        "hostBuild": "10.0.20348",
        "hypervAvailable": True,
        "appliedPlanHash": applied,
        "attemptedPlanHash": attempted or applied,
        "handlers": {"hv": {"state": hv, "reason": f"R{hv}", "message": f"{hv} on {name}"}},
    }
    labels = {"kubernetes.io/os": "windows"}
    if hv == "Ready":
        labels["runtime.wcow.dev/hv"] = "ready"
    return ObservedNode(name, labels, json.dumps(status), "10.0.20348")


def settle(state: Observed, settings: ReconcileSettings = SETTINGS) -> Observed:
    for _ in range(5):
        outcome = reconcile(state, settings, NOW)
        if not outcome.writes:
            return state
        state = apply(state, outcome)
    raise AssertionError("reconcile did not settle")


def with_nodes(state: Observed, nodes: list[ObservedNode]) -> Observed:
    return Observed(
        profiles=state.profiles,
        runtime_classes=state.runtime_classes,
        plan=state.plan,
        plan_config_map=state.plan_config_map,
        nodes=nodes,
        rollout_config_map=state.rollout_config_map,
    )


def plan_hash(state: Observed) -> str:
    assert state.plan_config_map is not None
    return str(json.loads(state.plan_config_map["data"][PLAN_KEY])["hash"])


def body(state: Observed, name: str = "hv") -> Body:
    return copy.deepcopy(next(p.body for p in state.profiles if p.name == name))


def new_without_nodes() -> Body:
    return body(settle(observed(profile_body("hv"))))


def ungated_without_nodes() -> Body:
    return body(settle(observed(profile_body("hv", scheduling={"requireReadyLabel": False}))))


def rolling() -> Body:
    nodes = [node(f"n{i}", None, hv="Pending") for i in range(3)]
    return body(settle(observed(profile_body("hv"), nodes=nodes)))


def _rolled(hv_of_n0: str) -> Observed:
    state = settle(observed(profile_body("hv"), nodes=[node(f"n{i}", None) for i in range(3)]))
    current = plan_hash(state)
    n0 = node("n0", None, current, hv="Failed") if hv_of_n0 == "Failed" else node("n0", current)
    return settle(with_nodes(state, [n0, *(node(f"n{i}", current) for i in (1, 2))]))


def healthy() -> Body:
    return body(_rolled("Ready"))


def halted() -> Body:
    return body(_rolled("Failed"))


def nodes_failed_at_rest() -> Body:
    """The rollout finished; later a node's agent reports the handler failed (its canary)."""
    state = _rolled("Ready")
    current = plan_hash(state)
    nodes = [node("n0", current, hv="Failed"), node("n1", current), node("n2", current)]
    return body(settle(with_nodes(state, nodes)))


def invalid_last_good_kept() -> Body:
    state = _rolled("Ready")
    bad = profile_body("hv", generation=2, status=body(state)["status"], vm={"memoryMB": 3})
    return body(
        settle(
            observed(
                bad,
                runtime_classes=list(state.runtime_classes.values()),
                plan_config_map=state.plan_config_map,
                rollout_config_map=state.rollout_config_map,
                nodes=state.nodes,
            )
        )
    )


def invalid_new() -> Body:
    return body(settle(observed(profile_body("hv", vm={"memoryMB": 3}))))


def handler_conflict() -> Body:
    state = observed(profile_body("a", handler="shared"), profile_body("hv", handler="shared"))
    return body(settle(state))


def runtime_class_conflict() -> Body:
    foreign = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "hv", "resourceVersion": "3"},
        "handler": "other",
    }
    return body(settle(observed(profile_body("hv"), runtime_classes=[foreign])))


def plan_too_large() -> Body:
    state = settle(observed(profile_body("a")))
    assert state.plan_config_map is not None
    small = ReconcileSettings(
        namespace=NAMESPACE, plan_max_bytes=len(state.plan_config_map["data"][PLAN_KEY]) + 10
    )
    grown = observed(
        *[p.body for p in state.profiles],
        profile_body("hv"),
        runtime_classes=list(state.runtime_classes.values()),
        plan_config_map=state.plan_config_map,
        rollout_config_map=state.rollout_config_map,
    )
    return body(settle(grown, small))


def generation_not_yet_seen() -> Body:
    changed = healthy()
    changed["metadata"]["generation"] = 2
    changed["spec"]["vm"] = {"memoryMB": 4096}
    return changed


def runtime_class_write_failed() -> Body:
    changed = healthy()
    changed["status"] = runtime_class_failed(changed["status"], OSError("503"), NOW)
    return changed


def not_yet_seen() -> Body:
    return profile_body("hv")


def deleting() -> Body:
    gone = healthy()
    gone["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    return gone


# scenario -> (kstatus status, the Reconciling or Stalled reason when True, or None)
EXPECTED: dict[Callable[[], Body], tuple[str, str | None]] = {
    not_yet_seen: ("Current", None),  # kstatus's gap: no status at all reads Current
    new_without_nodes: ("Failed", "NoEligibleNodes"),
    ungated_without_nodes: ("Current", None),
    rolling: ("InProgress", "RollingOut"),
    healthy: ("Current", None),
    halted: ("Failed", "RolloutHalted"),
    nodes_failed_at_rest: ("Failed", "NodesFailed"),
    invalid_new: ("Failed", "InvalidSpec"),
    invalid_last_good_kept: ("Failed", "InvalidSpec"),
    handler_conflict: ("Failed", "HandlerConflict"),
    runtime_class_conflict: ("Failed", "RuntimeClassConflict"),
    plan_too_large: ("Failed", "PlanTooLarge"),
    generation_not_yet_seen: ("InProgress", None),
    runtime_class_write_failed: ("InProgress", "RuntimeClassWriteFailed"),
    deleting: ("Terminating", None),
}


def conditions(obj: Body) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


@pytest.mark.parametrize("scenario", list(EXPECTED), ids=lambda s: s.__name__)
def test_kstatus_reads_each_state_as_a_user_expects(scenario: Callable[[], Body]) -> None:
    obj = scenario()
    expected, reason = EXPECTED[scenario]
    result, rule = compute(obj)
    assert result == expected, rule
    found = conditions(obj)
    if reason is not None:
        abnormal = found["Stalled" if expected == "Failed" else "Reconciling"]
        assert (abnormal["status"], abnormal["reason"]) == ("True", reason)
        assert abnormal["message"], "a person needs the message"


@pytest.mark.parametrize("scenario", list(EXPECTED), ids=lambda s: s.__name__)
def test_every_status_written_is_current_and_in_the_catalogue(
    scenario: Callable[[], Body],
) -> None:
    obj = scenario()
    if scenario in (not_yet_seen, generation_not_yet_seen):
        return  # the operator has not written these yet
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    found = conditions(obj)
    assert {c["observedGeneration"] for c in found.values()} == {obj["metadata"]["generation"]}
    true = [t for t in ("Reconciling", "Stalled") if found[t]["status"] == "True"]
    assert len(true) <= 1, "kstatus would read whichever comes first"
    catalogue = {(k.type, r.status, r.name) for k in CONDITIONS for r in k.reasons}
    for type_, condition in found.items():
        assert (type_, condition["status"], condition["reason"]) in catalogue


def test_the_scenarios_reach_every_stalled_and_reconciling_reason() -> None:
    reached = {reason for _, reason in EXPECTED.values() if reason is not None}
    assert reached == set(STALLING) | set(UNDER_WAY) - {"NodesPending"}
    assert nodes_pending_is_reconciling()


def nodes_pending_is_reconciling() -> bool:
    """NodesPending without a rollout under way: a node that joined after the rollout and is
    still proving the handler."""
    state = _rolled("Ready")
    current = plan_hash(state)
    nodes = [*state.nodes, node("n3", current, hv="Pending")]
    found = conditions(body(settle(with_nodes(state, nodes))))
    return (found["Reconciling"]["status"], found["Reconciling"]["reason"]) == (
        "True",
        "NodesPending",
    )


def test_the_rules_table_names_its_source() -> None:
    assert [r[3] for r in RULES] == [
        "Terminating",
        "InProgress",
        "InProgress",
        "Failed",
        "Current",
        "InProgress",
        "Current",
    ]
    assert all(r[1].split()[0] in ("generic.go", "status.go") for r in RULES)
