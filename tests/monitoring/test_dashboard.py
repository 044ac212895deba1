"""The Grafana dashboard (charts/wcow-runtime/files/grafana-dashboard.json): every query parses
as PromQL for promtool (each becomes a recording rule of a generated rule file that
`promtool check rules` reads), on metrics the code really exports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.monitoring import promtool
from tests.monitoring.exported import exported, used

DASHBOARD = ROOT / "charts" / "wcow-runtime" / "files" / "grafana-dashboard.json"
# What Grafana puts in for its variables before the query reaches Prometheus: the namespace
# variable's "All" value, and a range for $__rate_interval (four scrape intervals or more).
VARIABLES = {"$__rate_interval": "2m", "$namespace": ".*"}


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _queries() -> dict[str, str]:
    """Each target's expression, Grafana's variables put in, by panel id and refId."""
    found = {}
    for panel in _panels(_dashboard()["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            found[f"wcow:dashboard:panel{panel['id']}_{target['refId']}"] = expr
    return found


def _check(queries: dict[str, str], folder: Path) -> tuple[int, str]:
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": r, "expr": e} for r, e in queries.items()]}
        ]
    }
    path = folder / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    result = promtool.run("check", "rules", path)
    return result.returncode, result.stdout + result.stderr


def test_every_dashboard_query_parses_for_promtool(tmp_path: Path) -> None:
    queries = _queries()
    assert len(queries) >= 20
    code, output = _check(queries, tmp_path)
    assert code == 0, output
    assert f"SUCCESS: {len(queries)} rules found" in output


def test_the_check_catches_a_query_that_does_not_parse(tmp_path: Path) -> None:
    broken = {"wcow:dashboard:broken": 'sum by (state (wcow_rollout_nodes{namespace=~".*"})'}
    code, output = _check(broken, tmp_path)
    assert code != 0
    assert "parse error" in output


def test_no_variable_is_left_for_promtool() -> None:
    for name, expr in _queries().items():
        assert "$" not in expr, f"{name}: a Grafana variable the test does not fill in: {expr}"


def test_dashboard_queries_use_only_metrics_the_code_exports() -> None:
    names = used(_queries().values())
    assert names - exported() == set()

    # The dashboard shows every family the operator, its webhook and the agents export, but
    # for three that say little on a graph.
    def families(metrics: set[str] | frozenset[str]) -> set[str]:
        return {n.removesuffix("_bucket") for n in metrics if not n.endswith(("_count", "_sum"))}

    assert families(exported()) - families(names) == {
        "wcow_plan_size_bytes",  # shown as wcow_plan_size_ratio
        "wcow_plan_last_write_timestamp_seconds",
        "wcow_watch_lists_total",
    }


def test_every_panel_reads_the_chosen_data_source_and_namespace() -> None:
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace"}
    panels = [p for p in _panels(dashboard["panels"]) if p["type"] != "row"]
    assert len({p["id"] for p in _panels(dashboard["panels"])}) == len(
        list(_panels(dashboard["panels"]))
    )
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], panel["title"]


@pytest.mark.parametrize("key", ["uid", "title", "schemaVersion", "panels"])
def test_the_dashboard_has_what_grafana_needs_to_import_it(key: str) -> None:
    assert key in _dashboard()
