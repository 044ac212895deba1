"""The users' CI in .github/workflows: well-formed, pinned actions, and it runs what the
project's own checks run, plus e2e on kind."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.conftest import ROOT

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
