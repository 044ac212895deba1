"""Adopting a hand-written handler: containerd 1.7's default config already defines
``runhcs-wcow-hypervisor``, so a profile with that handler is a Conflict forever unless the
agent is told (``--adopt-handlers``) to take the table over, once, keeping what it replaced."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan
from tests.agent.fakes import FakeNode
from wcow_agent.cli import build_parser
from wcow_agent.cli import main as agent_main
from wcow_agent.config.merge import merge_config
from wcow_agent.config.merge_decision import MARKER
from wcow_agent.config.state import load_state
from wcow_agent.cycle.decisions import build_status
from wcow_contract.wire.agent_status import dump_agent_status
from wcow_contract.wire.plan import dump_plan

HANDLER = "runhcs-wcow-hypervisor"
V2_PATH = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")


def runtimes(text: str) -> dict[str, Any]:
    node: Any = tomllib.loads(text)
    for name in V2_PATH:
        node = node[name]
    return dict(node)


def hypervisor_plan() -> dict[str, Any]:
    return make_plan(hyperv("hv", handler=HANDLER, vm={"processorCount": 4, "memoryMB": 4096}))


def test_without_adoption_the_default_hypervisor_handler_is_a_conflict(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    report = node.agent().reconcile(hypervisor_plan())
    outcome = (report.handlers or {})[HANDLER]
    assert (outcome.state, outcome.reason) == ("Conflict", "ConflictingTable")
    assert "--adopt-handlers" in outcome.message
    assert node.config.read_text() == DEFAULT_17


def test_adoption_takes_the_table_over_once_and_reports_what_it_replaced(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    original = runtimes(DEFAULT_17)[HANDLER]
    plan = hypervisor_plan()

    report = node.agent_with(adopt={HANDLER}).reconcile(plan)

    outcome = (report.handlers or {})[HANDLER]
    assert (outcome.state, outcome.reason) == ("Ready", "CanaryPassed")
    assert runtimes(node.config.read_text())[HANDLER] == plan.handlers[HANDLER].runtime
    assert MARKER in node.config.read_text()
    # The replaced table is kept (state file) and said: event, log and status annotation.
    state, _ = load_state(node.root / "config.toml.wcow-state.json")
    assert state.adopted == {HANDLER: original}
    adopted = [e for e in report.events if e[0] == "HandlerAdopted"]
    assert len(adopted) == 1
    assert '"SandboxIsolation":1' in adopted[0][1]
    status = build_status(report, None, "2026-01-01T00:00:00Z")
    assert status is not None
    annotation = json.loads(dump_agent_status(status))["handlers"][HANDLER]
    assert "adopted the hand-written table" in annotation["message"]

    # Once: the table is the agent's now; a rerun changes nothing and adopts nothing.
    again = node.agent_with(adopt={HANDLER}).reconcile(plan)
    assert again.result == "unchanged"
    assert not [e for e in again.events if e[0] == "HandlerAdopted"]
    carried = build_status(again, status, "2026-01-01T00:05:00Z")
    assert carried is not None
    assert "adopted the hand-written table" in carried.handlers[HANDLER].message


def test_the_hand_written_table_comes_back_when_the_handler_leaves(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    agent = node.agent_with(adopt={HANDLER})
    agent.reconcile(hypervisor_plan())

    report = agent.reconcile(make_plan())

    assert report.result == "applied"
    text = node.config.read_text()
    assert runtimes(text)[HANDLER] == runtimes(DEFAULT_17)[HANDLER]
    assert MARKER not in text, "the user's table again, not the agent's"
    assert "AdoptedTableRestored" in [e[0] for e in report.events]
    assert load_state(node.root / "config.toml.wcow-state.json")[0].adopted == {}
    assert tomllib.loads(text) == tomllib.loads(DEFAULT_17)


def test_merge_adopts_with_the_flag_and_not_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(dump_plan(hypervisor_plan()))
    config = tmp_path / "config.toml"
    config.write_text(DEFAULT_17)
    args = ["merge", "--config", str(config), "--plan", str(plan), "--host-build", "10.0.20348"]

    assert agent_main([*args, "--write"]) == 0
    assert f"conflict: {HANDLER}" in capsys.readouterr().err
    assert config.read_text() == DEFAULT_17

    assert agent_main([*args, "--write", "--adopt-handlers", HANDLER]) == 0
    err = capsys.readouterr().err
    assert f"adopted: {HANDLER}: replaces the hand-written table" in err
    assert runtimes(config.read_text())[HANDLER]["options"]["VmProcessorCount"] == 4
    state = json.loads((tmp_path / "config.toml.wcow-state.json").read_text())
    assert state["adopted"][HANDLER] == runtimes(DEFAULT_17)[HANDLER]


def test_adoption_names_only_the_given_handlers() -> None:
    desired = {
        HANDLER: {"runtime_type": "io.containerd.runhcs.v1", "options": {"SandboxIsolation": 1}},
        "runhcs-wcow-process": {"runtime_type": "io.containerd.runhcs.v1"},
    }
    result = merge_config(DEFAULT_17, desired, {}, adopt={HANDLER})
    assert set(result.adopted) == {HANDLER}
    assert set(result.conflicts) == {"runhcs-wcow-process"}


def test_the_flag_takes_handler_names_only(capsys: pytest.CaptureFixture[str]) -> None:
    parsed = build_parser().parse_args(["run", "--adopt-handlers", "a, runhcs-wcow-hypervisor"])
    assert parsed.adopt_handlers == {"a", "runhcs-wcow-hypervisor"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--adopt-handlers", "Bad_Name"])
    assert "'Bad_Name' is not a list of containerd handler names" in capsys.readouterr().err
