"""The agent killed at every step of an apply: the file on disk is always the old or the
new complete file, the state file always parses, and the next agent converges.

Each scenario is first run to completion to count its host operations (containerd calls,
crictl calls, file replacements); then, for every operation k, a fresh node is built, the
agent dies at operation k (before it happens), and a new agent is started on the same
node until it has nothing left to retry."""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import FakeComputeCore, FakeNode
from wcow_agent.config import files
from wcow_agent.config.state import load_state
from wcow_agent.cycle.decisions import CycleReport
from wcow_agent.simulator.faults import SimulatedCrash


@dataclass
class Scenario:
    name: str
    prepare: Callable[[FakeNode], None]  # bring the node to the "before" state
    plan: dict[str, Any]
    converged_ready: set[str]  # handlers Ready at the end
    refuse: Callable[[str | None], str | None] | None = None


def _applied(*documents: dict[str, Any]) -> Callable[[FakeNode], None]:
    def prepare(node: FakeNode) -> None:
        node.agent().reconcile(make_plan(*documents))

    return prepare


SCENARIOS = [
    Scenario("first-apply", lambda node: None, make_plan(hyperv(), process()), {"hv", "proc"}),
    Scenario(
        "update",
        _applied(hyperv(), process()),
        make_plan(hyperv(vm={"processorCount": 4, "memoryMB": 4096}), process()),
        {"hv", "proc"},
    ),
    Scenario(
        "remove-batch",
        _applied(hyperv("a"), hyperv("b"), process()),
        make_plan(process()),
        {"proc"},
    ),
    Scenario(
        "rollback",
        lambda node: None,
        make_plan(hyperv("bad")),
        set(),
        refuse=lambda text: "invalid runtime" if text and "bad" in text else None,
    ),
]


def build(root: Path, scenario: Scenario, current: list[FakeNode]) -> FakeNode:
    root.mkdir()
    node = FakeNode(root, config_text=DEFAULT_17)
    current.append(node)
    scenario.prepare(node)
    if scenario.refuse is not None:
        node.faults.refuse = scenario.refuse
    node.ops.clear()
    node.restarts.clear()
    return node


@pytest.fixture
def counted_replace(monkeypatch: pytest.MonkeyPatch) -> list[FakeNode]:
    """Make every os.replace in wcow_agent.files a host operation of the current node:
    the agent may die just before a file is replaced, or just after."""
    current: list[FakeNode] = []

    def replace(source: Any, target: Any) -> None:
        node = current[-1]
        node.op(f"replace {Path(target).name}")
        os.replace(source, target)
        if Path(target).name == "config.toml":
            node.written_texts.append(Path(target).read_text(encoding="utf-8"))
        node.op(f"replaced {Path(target).name}")

    proxy = types.SimpleNamespace(
        **{name: getattr(os, name) for name in dir(os) if not name.startswith("__")}
    )
    proxy.replace = replace
    monkeypatch.setattr(files, "os", proxy)
    return current


def run_to_rest(node: FakeNode, plan: dict[str, Any]) -> CycleReport:
    """A freshly started agent process, cycling while it asks to retry."""
    node.crashed = False
    node.faults.crash_at_call = None
    node.computecore = FakeComputeCore(node)  # a new process holds no HCS handles
    agent = node.agent()
    report = agent.reconcile(plan)
    for _ in range(3):
        if not report.requeue and report.result not in ("failed",):
            break
        report = agent.reconcile(plan)
    return report


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_killed_at_every_step_the_file_is_whole_and_the_next_start_converges(
    scenario: Scenario, tmp_path: Path, counted_replace: list[FakeNode]
) -> None:
    clean = build(tmp_path / "clean", scenario, counted_replace)
    before = clean.disk_text()
    clean_report = clean.agent().reconcile(scenario.plan)
    after = clean.disk_text()
    # Every complete file the agent meant to have on disk at some point.
    whole = {before, after, *clean.written_texts}
    steps = list(clean.ops)
    assert len(steps) > 5, steps
    assert "replace config.toml" in steps
    expected_ready = {h for h, o in (clean_report.handlers or {}).items() if o.state == "Ready"}
    assert expected_ready == scenario.converged_ready

    for k in range(1, len(steps) + 1):
        node = build(tmp_path / f"crash-{k}", scenario, counted_replace)
        node.faults.crash_at_call = k
        with pytest.raises(SimulatedCrash):
            node.agent().reconcile(scenario.plan)
        where = f"killed at step {k} ({steps[k - 1]})"

        assert node.disk_text() in whole, f"{where}: a half-made config.toml"
        _, warning = load_state(node.root / "config.toml.wcow-state.json")
        assert warning is None, f"{where}: {warning}"

        report = run_to_rest(node, scenario.plan)

        assert node.disk_text() == after, f"{where}: did not converge to the same file"
        assert node.cri_up, f"{where}: containerd is down"
        assert node.running_text == node.disk_text(), f"{where}: containerd runs another file"
        ready = {h for h, o in (report.handlers or {}).items() if o.state == "Ready"}
        assert ready == scenario.converged_ready, f"{where}: {report.handlers}"
        assert node.canary_sandboxes() == [], f"{where}: a canary sandbox was left behind"
        state, _ = load_state(node.root / "config.toml.wcow-state.json")
        assert not state.restart_pending, where
        node.computecore.assert_clean()


def test_temp_files_of_a_killed_write_are_swept(node: FakeNode) -> None:
    leftover = node.root / ".config.toml.x1y2z3.tmp"
    leftover.write_text("half a file")
    node.agent().reconcile(make_plan())
    assert not leftover.exists()
    assert node.disk_text() == DEFAULT_17
