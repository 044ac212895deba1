"""config.toml is parsed once per text: the merge and the pause image share the document
within a cycle, and cycles on an unchanged file parse it no more; a file changed by anyone
is parsed again and judged on what it now says."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.agent.conftest import hyperv, make_plan
from wcow_agent.config.state import Paths
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.simulator.node import SimulatedNode


def test_config_toml_is_parsed_once_per_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = SimulatedNode("win-1", tmp_path / "node")
    agent = NodeAgent(
        node.host(), Paths(node.config), log_root=str(tmp_path / "logs"), timeouts=Timeouts()
    )
    plan = make_plan(hyperv())
    assert agent.reconcile(plan).result == "applied"
    parsed: list[str] = []
    loads = tomllib.loads

    def counted(text: str, **kwargs: object) -> dict[str, object]:
        parsed.append(text)
        return loads(text)

    monkeypatch.setattr(tomllib, "loads", counted)

    def parses_of_the_file() -> int:
        text = node.config.read_text(encoding="utf-8")
        return sum(1 for t in parsed if t == text)

    for _ in range(2):
        assert agent.reconcile(plan).result == "unchanged"
    assert parses_of_the_file() <= 1  # the cycle after the apply; then none

    parsed.clear()
    node.config.write_text(node.config.read_text(encoding="utf-8") + "# edited\n", "utf-8")
    report = agent.reconcile(plan)
    assert parses_of_the_file() == 1  # the new text, once: for the merge and the pause image
    assert "ConfigChangedElsewhere" in [reason for reason, _, _ in report.events]
