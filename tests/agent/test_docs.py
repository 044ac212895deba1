"""docs/agent.md and examples/ stay true to the agent: every flag and metric documented,
the example status is what the agent writes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.agent.conftest import hyperv, make_plan
from tests.agent.fakes import FakeNode
from wcow_agent.cli import build_parser
from wcow_agent.cli import main as agent_main
from wcow_agent.loop.metrics import Metrics
from wcow_contract.wire.agent_status import AgentStatus, dump_agent_status
from wcow_contract.wire.plan import dump_plan

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = action.choices[name]
    return chosen


@pytest.mark.parametrize("command", ["run", "uninstall", "canary", "merge", "simulate"])
def test_every_flag_is_documented(command: str) -> None:
    flags = [
        option
        for action in _subcommand(command)._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    ]
    missing = [flag for flag in flags if f"`{flag}" not in DOC and f"{flag} " not in DOC]
    assert not missing, f"docs/agent.md does not mention {missing}"


def test_run_defaults_others_rely_on_are_documented() -> None:
    run = _subcommand("run")
    defaults = {a.dest: a.default for a in run._actions}
    assert (defaults["metrics_port"], defaults["health_port"], defaults["resync_seconds"]) == (
        9551,
        9552,
        300.0,
    )
    for text in ("`NODE_NAME`", "`WCOW_PLAN_NAMESPACE`", "`wcow-system`", "`9551`", "`9552`"):
        assert text in DOC


def test_every_metric_is_documented() -> None:
    metrics = Metrics()
    names = {
        metric.name + ("_total" if metric.type == "counter" else "")
        for metric in metrics.registry.collect()
    }
    assert names
    missing = sorted(name for name in names if f"`{name}`" not in DOC)
    assert not missing, f"docs/agent.md does not list {missing}"


def test_the_example_status_is_what_the_agent_writes() -> None:
    text = (ROOT / "examples" / "agent-status.json").read_text(encoding="utf-8")
    status = AgentStatus.model_validate_json(text)
    assert json.loads(dump_agent_status(status)) == json.loads(text)
    assert {h.state for h in status.handlers.values()} >= {"Ready", "Failed", "NotEligible"}


def test_a_missing_config_toml_is_described_as_the_agent_treats_it(tmp_path: Path) -> None:
    """``run`` seeds a missing config.toml from the node's own ``containerd config default``
    (what containerd runs with when there is no file) once it has a table to add; the
    offline ``merge`` has no containerd to ask and refuses. docs/profiles.md and docs/agent.md
    say so."""

    node = FakeNode(tmp_path)
    node.agent().reconcile(make_plan(hyperv()))
    assert "containerd config default" in node.ops
    assert node.config.exists()
    plan = tmp_path / "plan.json"
    plan.write_text(dump_plan(make_plan(hyperv())))
    missing = tmp_path / "elsewhere" / "config.toml"
    merge = ["merge", "--config", str(missing), "--plan", str(plan), "--host-build", "10.0.20348"]
    assert agent_main(merge) == 1
    assert not missing.exists()

    profiles = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")
    assert "A missing config.toml is never created" not in profiles
    for text in (" ".join(profiles.split()), " ".join(DOC.split())):
        assert "seeded from the node's own `containerd config default`" in text
        assert "`merge` refuses a missing file" in text
