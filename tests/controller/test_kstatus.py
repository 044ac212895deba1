"""kstatus (tests/kstatus.py: cli-utils' rules, copied with their source) applied to every
state the reconcile core can produce: what Flux's `wait: true` makes of a profile.

Each scenario is driven through the pure reconcile with the writes applied, as the API server
would store them; the profile object that results is judged by kstatus, and its conditions
are held to the catalogue the docs' tables are rendered from (wcow_contract.condition_table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.controller.states import (
    Body,
    body,
    deleting,
    generation_not_yet_seen,
    halted,
    handler_conflict,
    healthy,
    invalid_last_good_kept,
    invalid_new,
    new_without_nodes,
    node,
    nodes_failed_at_rest,
    not_yet_seen,
    plan_hash,
    plan_too_large,
    rolled,
    rolling,
    runtime_class_conflict,
    runtime_class_write_failed,
    settle,
    ungated_without_nodes,
    with_nodes,
)
from tests.kstatus import RULES, compute
from wcow_contract.condition_table import CONDITIONS, STALLING, UNDER_WAY

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
    state = rolled("Ready")
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
