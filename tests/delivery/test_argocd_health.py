"""The Argo CD health check, run by a real Lua 5.1 over its own health_test.yaml, as Argo
CD's resource_customizations tests do (each test: inputPath -> expected healthStatus)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.argocd import CHECK, TESTDATA, health, rendered_testdata

TESTS: list[dict[str, Any]] = yaml.safe_load(
    (CHECK / "health_test.yaml").read_text(encoding="utf-8")
)["tests"]


@pytest.mark.parametrize("case", TESTS, ids=lambda case: case["inputPath"])
def test_health_is_what_health_test_yaml_says(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((CHECK / case["inputPath"]).read_text(encoding="utf-8"))
    assert health(obj) == case["healthStatus"]


def test_every_testdata_object_is_tested_and_every_health_is_shown() -> None:
    tested = {case["inputPath"] for case in TESTS}
    assert tested == {f"testdata/{path.name}" for path in (CHECK / "testdata").iterdir()}
    assert {case["healthStatus"]["status"] for case in TESTS} == {
        "Healthy",
        "Progressing",
        "Degraded",
    }
    for case in TESTS:
        status = case["healthStatus"]
        if status["status"] != "Healthy" and not status["message"].startswith("Waiting"):
            reason = status["message"].split(":", 1)[0]
            assert reason.isalnum(), status  # the reason (CamelCase) leads
            assert reason[0].isupper(), status


def test_testdata_is_what_the_operator_writes_today() -> None:
    """Drift: after a change of the conditions, ``.venv/bin/python -m tests.argocd``."""
    for name, text in rendered_testdata().items():
        assert (CHECK / "testdata" / name).read_text(encoding="utf-8") == text, name
    assert set(TESTDATA) == {path.name for path in (CHECK / "testdata").iterdir()}


def test_degraded_and_progressing_follow_stalled_and_reconciling() -> None:
    """The check agrees with kstatus: Stalled=True is Degraded, Reconciling=True is
    Progressing, whatever Ready says."""
    obj = yaml.safe_load((CHECK / "testdata" / "healthy.yaml").read_text(encoding="utf-8"))
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    conditions["Stalled"].update(status="True", reason="HandlerConflict", message="m")
    assert health(obj) == {"status": "Degraded", "message": "HandlerConflict: m"}
    conditions["Stalled"].update(status="False")
    conditions["Reconciling"].update(status="True", reason="NodesPending", message="")
    assert health(obj) == {"status": "Progressing", "message": "NodesPending"}
