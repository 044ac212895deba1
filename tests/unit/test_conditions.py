from __future__ import annotations

from datetime import UTC, datetime, timedelta

from wcow_contract.conditions import READY, VALID, find_condition, set_condition

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_new_condition_is_appended_with_the_time() -> None:
    conditions = set_condition(
        [], VALID, status="True", reason="Valid", message="ok", observed_generation=1, now=T0
    )
    assert len(conditions) == 1
    assert conditions[0].last_transition_time == "2026-01-02T03:04:05Z"
    assert conditions[0].observed_generation == 1


def test_transition_time_moves_only_when_status_changes() -> None:
    first = set_condition(
        [],
        READY,
        status="False",
        reason="NodesPending",
        message="0/3 nodes",
        observed_generation=1,
        now=T0,
    )
    same = set_condition(
        first,
        READY,
        status="False",
        reason="NodesPending",
        message="1/3 nodes",
        observed_generation=2,
        now=T1,
    )
    assert same[0].last_transition_time == first[0].last_transition_time
    assert same[0].message == "1/3 nodes"
    assert same[0].observed_generation == 2
    flipped = set_condition(
        same,
        READY,
        status="True",
        reason="Ready",
        message="3/3 nodes",
        observed_generation=2,
        now=T1,
    )
    assert flipped[0].last_transition_time == "2026-01-02T03:09:05Z"


def test_other_conditions_keep_their_place() -> None:
    conditions = set_condition(
        [], VALID, status="True", reason="Valid", message="", observed_generation=1, now=T0
    )
    conditions = set_condition(
        conditions,
        READY,
        status="False",
        reason="NodesPending",
        message="",
        observed_generation=1,
        now=T0,
    )
    conditions = set_condition(
        conditions,
        VALID,
        status="False",
        reason="InvalidSpec",
        message="bad",
        observed_generation=2,
        now=T1,
    )
    assert [c.type for c in conditions] == [VALID, READY]
    assert find_condition(conditions, VALID) is not None
    assert find_condition(conditions, "Missing") is None
