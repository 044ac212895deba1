"""``wcow-agent uninstall`` and ``wcow-agent canary`` on a faked node, and the lock that
keeps two agents off one config.toml."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from tests.conftest import SAMPLES
from wcow_agent.cli import build_parser, main
from wcow_agent.commands.canary_command import run_canaries
from wcow_agent.commands.uninstall_command import uninstall
from wcow_agent.config.files import FileLock
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_contract.wire.plan import dump_plan
from wcow_operator.cli import main as wcow_main
from wcow_support.health import StepHealth


def applied(node: FakeNode, cluster: FakeCluster) -> None:
    cluster.set_plan(make_plan(hyperv(), process()))
    AgentLoop(
        node.agent(),
        cluster,
        RunOptions("win-1"),
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
    ).cycle()
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"


def test_uninstall_restores_the_file_restarts_once_and_cleans_the_node(
    node: FakeNode, cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    applied(node, cluster)
    node.restarts.clear()
    args = build_parser().parse_args(["uninstall", "--config", str(node.config)])

    code = uninstall(args, {"NODE_NAME": "win-1"}, lambda a, s: node.host(), lambda: cluster)

    assert code == 0, capsys.readouterr().err
    assert node.config.read_text() == DEFAULT_17
    assert len(node.restarts) == 1
    assert node.running_text == DEFAULT_17
    assert sorted(p.name for p in node.root.iterdir() if p.name.startswith("config.toml")) == [
        "config.toml"
    ]
    assert not any(key.startswith("runtime.wcow.dev/") for key in cluster.labels)
    assert not any(key.startswith("node.runtime.wcow.dev/") for key in cluster.labels), (
        "capability and guest-build labels go too"
    )
    assert "runtime.wcow.dev/agent-status" not in cluster.node["annotations"]
    assert cluster.labels["kubernetes.io/os"] == "windows"


def test_uninstall_puts_the_file_back_when_containerd_will_not_start_without_our_tables(
    node: FakeNode, cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    applied(node, cluster)
    merged = node.config.read_text()
    node.faults.refuse = lambda text: "broken" if text == DEFAULT_17 else None
    args = build_parser().parse_args(["uninstall", "--config", str(node.config), "--no-kubernetes"])

    code = uninstall(args, {}, lambda a, s: node.host(), lambda: cluster)

    assert code == 1
    assert "put back as it was" in capsys.readouterr().err
    assert node.config.read_text() == merged
    assert node.running_text == merged
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready", "--no-kubernetes leaves the Node"


def test_uninstall_deletes_a_config_the_agent_created(
    tmp_path: Path, cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    node = FakeNode(tmp_path)
    node.agent().reconcile(make_plan(hyperv()))
    assert node.config.exists()
    args = build_parser().parse_args(["uninstall", "--config", str(node.config)])

    assert uninstall(args, {}, lambda a, s: node.host(), lambda: cluster) == 0

    assert not node.config.exists()
    assert node.running_text is None, "containerd runs on its built-in defaults again"
    assert "NODE_NAME not set" in capsys.readouterr().err


def test_canary_command_prints_one_result_per_handler(
    node: FakeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan(hyperv(), process())
    node.agent().reconcile(plan)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(dump_plan(plan))
    args = build_parser().parse_args(["canary", "hv", "proc", "--plan", str(plan_file)])

    assert run_canaries(args, lambda a, s: node.host()) == 0

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["handler"], r["passed"], r["reason"]) for r in lines] == [
        ("hv", True, "CanaryPassed"),
        ("proc", True, "CanaryPassed"),
    ]
    assert lines[0]["observed"] == {"memoryMB": 2048}

    node.faults.ignore_isolation = True
    assert (
        run_canaries(
            build_parser().parse_args(["canary", "hv", "--plan", str(plan_file)]),
            lambda a, s: node.host(),
        )
        == 1
    )
    args = build_parser().parse_args(["canary", "nope", "--plan", str(plan_file)])
    assert run_canaries(args, lambda a, s: node.host()) == 2


def test_merge_write_refuses_while_another_agent_holds_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rendered"
    assert wcow_main(["render", "--out", str(out), str(SAMPLES)]) == 0
    config = tmp_path / "config.toml"
    shutil.copy(
        Path(__file__).resolve().parents[1] / "fixtures/configs/v2-containerd-1.7-default.toml",
        config,
    )
    original = config.read_bytes()
    args = [
        "merge",
        "--config",
        str(config),
        "--plan",
        str(out / "plan.json"),
        "--host-build",
        "10.0.20348",
        "--write",
    ]

    with FileLock(tmp_path / "config.toml.wcow-lock"):
        assert main(args) == 1
        assert "another wcow-agent" in capsys.readouterr().err
        assert config.read_bytes() == original
    assert main(args) == 0
    assert config.read_bytes() != original
