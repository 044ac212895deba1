"""The users' CI in .github/workflows: well-formed, pinned actions, and it runs what the
project's own checks run, plus e2e on kind; and the Windows workflow that exercises the
agent's host layer on a real Windows Server 2022 runner (not run here: its commands are
parsed with the real parsers instead)."""

from __future__ import annotations

import re
import shlex
import sys
from typing import Any

import yaml

from tests.agent.windows.host_check import main as host_check_main
from tests.conftest import ROOT
from wcow_agent.cli import build_parser as agent_parser
from wcow_operator.cli import build_parser as operator_parser

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _load(path: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_workflows_exist_and_pin_every_action() -> None:
    assert WORKFLOWS
    for path in WORKFLOWS:
        workflow = _load(path)
        assert workflow["permissions"] == {"contents": "read"}, path.name
        for step in _steps(workflow):
            if "uses" in step:
                assert re.search(r"@(v\d+(\.\d+)*|[0-9a-f]{40})$", step["uses"]), step["uses"]


def test_ci_runs_the_project_checks_and_e2e_on_kind() -> None:
    workflow = _load(ROOT / ".github" / "workflows" / "ci.yml")
    runs = " ".join(step.get("run", "") for step in _steps(workflow))
    assert "make test" in runs
    assert "deploy/generate.py --check" in runs
    e2e = workflow["jobs"]["e2e"]
    assert any(step.get("uses", "").startswith("helm/kind-action@") for step in e2e["steps"])
    test_step = next(step for step in e2e["steps"] if "tests/e2e" in step.get("run", ""))
    assert test_step["env"]["KUBECONFIG"]
    versions = [entry["kubernetes"] for entry in e2e["strategy"]["matrix"]["include"]]
    assert any(v.startswith("v1.30.") for v in versions), "the policy's minimum is tested"


WINDOWS = ROOT / ".github" / "workflows" / "windows-agent.yml"


def _windows_commands(workflow: dict[str, Any], program: str) -> list[list[str]]:
    """The ``program ...`` command lines of the Windows job, with ``$env:X`` filled in from
    the workflow's env, split as PowerShell would split these simple lines."""
    env = {key: str(value) for key, value in workflow["env"].items()}
    commands = []
    for step in _steps(workflow):
        for line in step.get("run", "").splitlines():
            text = line.strip()
            if not text.startswith(program + " "):
                continue
            text = re.sub(r"\$env:([A-Z_]+)", lambda m: env.get(m.group(1), "X"), text)
            commands.append(shlex.split(text.replace("\\", "/"))[1:])
    return commands


def test_the_windows_workflow_exercises_the_host_layer_for_real() -> None:
    workflow = _load(WINDOWS)
    job = workflow["jobs"]["host"]
    assert job["runs-on"] == "windows-2022"
    env = workflow["env"]
    # Pinned versions, and checksums checked before anything is unpacked.
    assert re.fullmatch(r"\d+\.\d+\.\d+", env["CONTAINERD_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{64}", env["CONTAINERD_SHA256"])
    assert re.fullmatch(r"v\d+\.\d+\.\d+", env["CRICTL_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{40}", env["WINCNI_COMMIT"])
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    for archive in ("containerd", "crictl"):
        step = next(
            s
            for s in job["steps"]
            if f"{archive}-" in s.get("run", "") and "Get-FileHash" in s.get("run", "")
        )
        text = step["run"]
        assert text.index("Get-FileHash") < text.index("tar.exe"), archive
        assert "throw" in text
    assert "$env:CONTAINERD_SHA256" in runs
    # The host layer, then merge --write, a restart, a process canary, uninstall.
    assert "python -m tests.agent.windows.host_check" in runs
    order = [
        runs.index("tests.agent.windows.host_check"),
        runs.index("wcow-agent merge"),
        runs.index("Restart-Service containerd"),
        runs.index("wcow-agent canary"),
        runs.index("wcow-agent uninstall"),
    ]
    assert order == sorted(order)
    assert "isolation: Process" in runs
    assert workflow["permissions"] == {"contents": "read"}


def test_the_windows_workflows_commands_parse_with_the_real_parsers() -> None:
    workflow = _load(WINDOWS)
    agent = _windows_commands(workflow, "wcow-agent")
    assert [args[0] for args in agent] == ["merge", "canary", "uninstall"]
    for args in agent:
        parsed = agent_parser().parse_args(args)
        assert parsed.command == args[0]
    merge = agent_parser().parse_args(agent[0])
    assert merge.write
    assert merge.containerd_version == "2"
    render = _windows_commands(workflow, "wcow")
    assert render
    operator_parser().parse_args(render[0])
    check = [c for c in _windows_commands(workflow, "python") if "pip" not in c]
    assert check == [["-m", "tests.agent.windows.host_check", "--expect-build", "20348"]]
    assert host_check_main(["--expect-build", "20348"]) == (0 if sys.platform == "win32" else 2)


def test_the_windows_workflow_is_not_part_of_the_local_ci() -> None:
    local = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "windows" not in local.lower()
    assert "host_check" not in (ROOT / "Makefile").read_text(encoding="utf-8")
