"""The chart's alerting rules (charts/wcow-runtime/files/prometheus-rules.yaml): valid for
Prometheus, each alert unit-tested with promtool firing and not firing, on metrics the code
really exports, with a runbook in docs/runbooks.md."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.monitoring import promtool
from tests.monitoring.exported import exported, used

RULES = ROOT / "charts" / "wcow-runtime" / "files" / "prometheus-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOKS_DOC = ROOT / "docs" / "runbooks.md"
RUNBOOKS = "https://github.com/wcow-runtime/wcow-runtime/blob/main/docs/runbooks.md#"
SEVERITIES = {"critical", "warning", "info"}


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_accepts_the_rule_file_with_every_lint() -> None:
    result = promtool.run("check", "rules", "--lint=all", "--lint-fatal", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass() -> None:
    result = promtool.run("test", "rules", UNIT_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_catch_a_rule_that_ignores_the_rollout(tmp_path: Path) -> None:
    """Without the clause that spares nodes waiting for the rollout's permission, the
    handler alert fires where its unit test says it must not: the tests can fail."""
    chart_files = tmp_path / "charts" / "wcow-runtime" / "files"
    chart_files.mkdir(parents=True)
    text = RULES.read_text(encoding="utf-8")
    clause = "unless on (job, instance) (wcow_agent_rollout_waiting == 1)"
    assert clause in text
    (chart_files / RULES.name).write_text(text.replace(clause, ""), encoding="utf-8")
    tests = tmp_path / "tests" / "monitoring"
    tests.mkdir(parents=True)
    shutil.copy(UNIT_TESTS, tests)

    result = promtool.run("test", "rules", tests / UNIT_TESTS.name)

    assert result.returncode != 0
    assert "alertname: WcowHandlerNotReady" in result.stdout + result.stderr
    assert 'reason="WaitingForRollout"' in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    cases = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {alert["alert"] for alert in _alerts()}
    assert names - firing == set(), "alerts never seen firing"
    assert names - quiet == set(), "alerts never seen quiet"
    assert (firing | quiet) - names == set(), "tests of alerts that do not exist"


def test_alerts_cover_what_the_issue_asks_for() -> None:
    names = {alert["alert"] for alert in _alerts()}
    assert {
        "WcowRolloutHalted",
        "WcowHandlerNotReady",
        "WcowContainerdRolledBack",
        "WcowOperatorNoLeader",
        "WcowWebhookFailing",
        "WcowWebhookRefusingPods",
        "WcowPlanNearSizeLimit",
        "WcowAgentsNotReporting",
    } <= names


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_each_alert_has_a_severity_a_summary_a_description_and_a_runbook(
    alert: dict[str, Any],
) -> None:
    assert alert["labels"]["severity"] in SEVERITIES
    annotations = alert["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["summary"].endswith(".")
    assert len(annotations["description"]) > len(annotations["summary"])
    assert annotations["runbook_url"] == RUNBOOKS + alert["alert"].lower()


def _sections(markdown: str) -> dict[str, str]:
    """Level-3 sections by their GitHub anchor (a heading of one word: its lower case)."""
    parts = re.split(r"^### (\S+)\n", markdown, flags=re.MULTILINE)
    return {
        name.lower(): body.split("\n## ")[0]
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_each_runbook_says_what_it_means_how_to_confirm_and_what_to_do(
    alert: dict[str, Any],
) -> None:
    anchor = alert["annotations"]["runbook_url"].removeprefix(RUNBOOKS)
    sections = _sections(RUNBOOKS_DOC.read_text(encoding="utf-8"))
    assert anchor in sections, f"docs/runbooks.md has no section '### {alert['alert']}'"
    body = sections[anchor]
    for part in ("**What it means.**", "**How to confirm.**", "**What to do.**"):
        assert part in body, f"the runbook of {alert['alert']} lacks {part}"


def test_rules_use_only_metrics_the_operator_and_agents_export() -> None:
    names = used(alert["expr"] for alert in _alerts())
    assert names, "no wcow metric found in the rules"
    assert names - exported() == set()
