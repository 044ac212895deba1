"""The wire formats between the operator and the agents, and what each side does with a peer
one version ahead or behind (docs/architecture.md, "Wire formats").

tests/fixtures/wire/ holds the bytes of schemaVersion 1 as the code before the contract
package wrote them: the plan of deploy/samples, a rollout and an agent's status annotation.
This version must write the same bytes for the same input and read them back; a change to a
wire format fails here first, and needs a decision about its schema version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import ROOT, SAMPLES, MakeProfile
from wcow_agent.cycle.rollout_verdict import Permission
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.wire.agent_status import (
    AGENT_STATUS_ANNOTATION,
    AGENT_STATUS_SCHEMA_VERSION,
    dump_agent_status,
    parse_agent_status,
)
from wcow_contract.wire.canonical import canonical_json
from wcow_contract.wire.plan import (
    PLAN_CONFIGMAP,
    PLAN_HASH_ANNOTATION,
    PLAN_KEY,
    PLAN_SCHEMA_VERSION,
    Plan,
    dump_plan,
    plan_entry,
    plan_hash,
)
from wcow_contract.wire.rollout import (
    PACED_ANNOTATION,
    PACED_VALUE,
    ROLLOUT_CONFIGMAP,
    ROLLOUT_KEY,
    ROLLOUT_SCHEMA_VERSION,
    dump_rollout,
    may_change,
    parse_rollout,
)
from wcow_operator.cli import load_profiles
from wcow_operator.render.configmaps import plan_config_map, rollout_config_map
from wcow_operator.render.profile_set import render_all

WIRE = ROOT / "tests" / "fixtures" / "wire"
PLAN_V1 = (WIRE / "plan-v1.json").read_text(encoding="utf-8")
ROLLOUT_V1 = (WIRE / "rollout-v1.json").read_text(encoding="utf-8").strip()
ROLLOUT_HELD_V1 = (WIRE / "rollout-v1-held.json").read_text(encoding="utf-8").strip()
STATUS_V1 = (WIRE / "agent-status-v1.json").read_text(encoding="utf-8").strip()


def sample_plan() -> Plan:
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    return render_all([item.profile for item in loaded]).plan


def rehashed(plan: dict[str, Any]) -> str:
    plan["hash"] = plan_hash({k: v for k, v in plan.items() if k != "hash"})
    return json.dumps(plan)


def test_the_names_on_the_wire_are_pinned() -> None:
    """Both sides find each other by these; renaming one is a change of the wire format."""
    assert (PLAN_CONFIGMAP, PLAN_KEY) == ("wcow-runtime-plan", "plan.json")
    assert PLAN_HASH_ANNOTATION == "runtime.wcow.dev/plan-hash"
    assert (ROLLOUT_CONFIGMAP, ROLLOUT_KEY) == ("wcow-runtime-rollout", "rollout.json")
    assert (PACED_ANNOTATION, PACED_VALUE) == ("runtime.wcow.dev/rollout", "paced")
    assert AGENT_STATUS_ANNOTATION == "runtime.wcow.dev/agent-status"
    assert (ready_label("hv"), READY_VALUE) == ("runtime.wcow.dev/hv", "ready")
    assert PLAN_SCHEMA_VERSION == ROLLOUT_SCHEMA_VERSION == AGENT_STATUS_SCHEMA_VERSION == 1


# -- the plan --------------------------------------------------------------------------------


def test_the_operator_writes_the_released_plan() -> None:
    plan = sample_plan()
    assert dump_plan(plan) == PLAN_V1
    config_map = plan_config_map(plan, "wcow-system", paced=True)
    assert config_map["data"][PLAN_KEY].encode("utf-8") == canonical_json(json.loads(PLAN_V1))
    assert config_map["metadata"]["annotations"][PLAN_HASH_ANNOTATION] == plan.hash


def test_the_agent_reads_the_released_plan() -> None:
    plan = load_plan(PLAN_V1)
    assert plan == sample_plan()
    assert plan.hash == json.loads(PLAN_V1)["hash"]


def test_a_plan_of_another_schema_version_is_refused_naming_what_to_upgrade() -> None:
    newer = json.loads(PLAN_V1)
    newer["schemaVersion"] = PLAN_SCHEMA_VERSION + 1
    with pytest.raises(PlanError, match="schemaVersion 2 is not 1: upgrade wcow-agent"):
        load_plan(rehashed(newer))


def _at_top(plan: dict[str, Any]) -> None:
    plan["futureField"] = 1


def _in_entry(plan: dict[str, Any]) -> None:
    plan["handlers"]["hyperv-ltsc2022"]["futureField"] = 1


def _in_vm(plan: dict[str, Any]) -> None:
    plan["handlers"]["hyperv-ltsc2022"]["vm"]["futureField"] = 1


def _in_spec(plan: dict[str, Any]) -> None:
    plan["handlers"]["hyperv-ltsc2022"]["spec"]["futureField"] = 1


@pytest.mark.parametrize(
    ("add", "where", "why"),
    [
        (_at_top, r"plan: futureField", "never renders this field"),
        (_in_entry, r"handlers\.hyperv-ltsc2022\.futureField", "never renders this field"),
        (_in_vm, r"handlers\.hyperv-ltsc2022\.vm\.futureField", "never renders this field"),
        (_in_spec, r"handlers\.hyperv-ltsc2022\.spec\.futureField", "not a field"),
    ],
    ids=["top", "entry", "vm", "spec"],
)
def test_a_field_this_agent_does_not_render_is_refused_naming_it(
    add: Callable[[dict[str, Any]], None], where: str, why: str
) -> None:
    """What an operator one version ahead might add: the agent refuses the plan whole (it
    keeps config.toml and its labels, and says PlanUnusable), never applies part of it."""
    newer = json.loads(PLAN_V1)
    add(newer)
    with pytest.raises(PlanError, match=rf"{where}.*{why}"):
        load_plan(rehashed(newer))


def test_a_profile_field_left_at_its_default_is_not_in_the_plan(make_profile: MakeProfile) -> None:
    """Why a new optional profile field does not change the plan of the profiles that leave it
    alone, so agents of the version before keep applying them: entries carry the spec
    without its defaults."""
    plain = make_profile("hv")
    spelled_out = make_profile(
        "hv", canary={"enabled": True, "timeoutSeconds": 180}, sandbox={"platform": "windows/amd64"}
    )
    assert plan_entry(spelled_out) == plan_entry(plain)


# -- the rollout -----------------------------------------------------------------------------


def test_the_operator_writes_the_released_rollout() -> None:
    rollout = parse_rollout(ROLLOUT_V1)
    assert rollout is not None
    assert dump_rollout(rollout) == ROLLOUT_V1
    assert rollout_config_map(rollout, "wcow-system")["data"][ROLLOUT_KEY] == ROLLOUT_V1


def test_an_agent_reads_a_rollout_with_fields_it_does_not_know() -> None:
    newer = json.loads(ROLLOUT_V1)
    newer["futureField"] = {"any": "thing"}
    newer["halted"]["futureField"] = 1
    assert parse_rollout(json.dumps(newer)) == parse_rollout(ROLLOUT_V1)


def test_a_field_added_to_a_halted_node_makes_the_rollout_unreadable() -> None:
    """The one exception: ``halted.nodes`` are the profile status's NodeFailure, which refuses
    unknown fields; an operator must not add one there within schemaVersion 1."""
    newer = json.loads(ROLLOUT_V1)
    newer["halted"]["nodes"][0]["futureField"] = 1
    assert parse_rollout(json.dumps(newer)) is None


def test_a_rollout_of_another_schema_version_lets_nobody_change() -> None:
    newer = json.loads(ROLLOUT_V1)
    newer["schemaVersion"] = ROLLOUT_SCHEMA_VERSION + 1
    text = json.dumps(newer)
    assert parse_rollout(text) is None
    assert not may_change(parse_rollout(text), newer["planHash"], "win-a")
    permission = Permission.of(True, True, text, "wcow-system")
    assert permission.rollout is None
    assert "unreadable" in (permission.problem or "")


# -- the agent status ------------------------------------------------------------------------


def test_the_agent_writes_the_released_status() -> None:
    status = parse_agent_status(STATUS_V1)
    assert status is not None
    assert dump_agent_status(status) == STATUS_V1


def test_the_operator_reads_a_status_with_fields_it_does_not_know() -> None:
    newer = json.loads(STATUS_V1)
    newer["futureField"] = [1, 2]
    newer["handlers"]["wcow-process"]["futureField"] = "x"
    assert parse_agent_status(json.dumps(newer)) == parse_agent_status(STATUS_V1)


def test_the_operator_reads_the_status_of_an_agent_without_the_newer_fields() -> None:
    older = json.loads(STATUS_V1)
    for key in ("attemptedPlanHash", "waiting", "configVersion", "containerdVersion"):
        older.pop(key, None)
    status = parse_agent_status(json.dumps(older))
    assert status is not None
    assert status.attempted_plan_hash is None
    assert status.handlers == parse_agent_status(STATUS_V1).handlers  # type: ignore[union-attr]


def test_a_handler_state_the_operator_does_not_know_makes_the_status_unreadable() -> None:
    """A new state is a new schema version: an operator one version behind reads the
    report as no report."""
    newer = json.loads(STATUS_V1)
    newer["handlers"]["wcow-process"]["state"] = "Draining"
    assert parse_agent_status(json.dumps(newer)) is None


def test_a_status_of_another_schema_version_is_unreadable() -> None:
    """Read as no report at all (the node counts as not reporting), as a report that breaks
    the model is: never partly believed."""
    newer = json.loads(STATUS_V1)
    newer["schemaVersion"] = AGENT_STATUS_SCHEMA_VERSION + 1
    assert parse_agent_status(json.dumps(newer)) is None


def test_a_rollout_with_a_held_back_profile_keeps_its_bytes_and_agents_read_it() -> None:
    """``held`` was added within schema 1 (the operator's memory of a held-back change): the
    operator writes it as released from now on, an agent's permission is the same with it,
    and a rollout without it keeps the bytes released before it (above)."""
    held = parse_rollout(ROLLOUT_HELD_V1)
    assert held is not None
    assert dump_rollout(held) == ROLLOUT_HELD_V1
    hold = held.held["hv-ltsc2022"]
    assert (hold.handler, hold.generation, hold.entry) == ("hyperv-ltsc2022", 4, None)
    assert held.model_copy(update={"held": {}}) == parse_rollout(ROLLOUT_V1).model_copy(  # type: ignore[union-attr]
        update={"halted": None}
    )
    assert may_change(held, held.plan_hash, "win-a")
