"""The chart's alerts (PrometheusRule) and Grafana dashboard (ConfigMap for the sidecar): off
by default, the rule file and the dashboard as they are tested in tests/monitoring, and only
the alert groups of the parts a release installs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from deploy.generate import CHART, NAMESPACE, RELEASE

from tests.delivery.helpers import find, kinds, render

FILES = CHART / "files"
MONITORING: dict[str, Any] = {
    "metrics": {
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboard": {"enabled": True},
    }
}


def _groups(values: dict[str, Any]) -> list[str]:
    rule = find(render(values), "PrometheusRule", RELEASE)
    return [group["name"] for group in rule["spec"]["groups"]]


def _with(extra: dict[str, Any]) -> dict[str, Any]:
    return {**MONITORING, **extra}


def test_neither_is_rendered_by_default() -> None:
    objects = render()
    assert "PrometheusRule" not in kinds(objects)
    assert not any(o["metadata"]["name"].endswith("-dashboard") for o in objects)


def test_the_rule_holds_the_tested_rule_file_with_the_labels_prometheus_selects_by() -> None:
    rule = find(render(MONITORING), "PrometheusRule", RELEASE)
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    tested = yaml.safe_load((FILES / "prometheus-rules.yaml").read_text(encoding="utf-8"))
    assert rule["spec"] == tested


@pytest.mark.parametrize(
    ("values", "groups"),
    [
        ({"agent": {"enabled": False}}, ["wcow-operator", "wcow-rollout", "wcow-webhook"]),
        ({"webhook": {"enabled": False}}, ["wcow-operator", "wcow-rollout", "wcow-agent"]),
        # GitOps without the operator: nobody exports the operator's or the webhook's metrics.
        ({"operator": {"replicas": 0}, "webhook": {"enabled": False}}, ["wcow-agent"]),
    ],
    ids=["operator-only", "no-webhook", "no-operator"],
)
def test_alerts_of_parts_not_installed_are_left_out(
    values: dict[str, Any], groups: list[str]
) -> None:
    assert _groups(_with(values)) == groups


def test_a_group_the_template_does_not_know_stops_the_render(tmp_path: Path) -> None:
    """A new group in the rule file must be given its condition in the template, rather
    than be dropped from every release without a word."""
    chart = tmp_path / "wcow-runtime"
    shutil.copytree(CHART, chart)
    rules = chart / "files" / "prometheus-rules.yaml"
    rules.write_text(
        rules.read_text(encoding="utf-8").replace("name: wcow-webhook", "name: wcow-other"),
        encoding="utf-8",
    )
    with (
        helm_python.Chart.load(chart) as loaded,
        pytest.raises(helm_python.HelmRenderError, match="group wcow-other is not known"),
    ):
        loaded.render(MONITORING, name=RELEASE, namespace=NAMESPACE)


def test_the_dashboard_is_a_configmap_the_grafana_sidecar_loads() -> None:
    config_map = find(render(MONITORING), "ConfigMap", f"{RELEASE}-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    shipped = json.loads(config_map["data"]["wcow-runtime.json"])
    tested = json.loads((FILES / "grafana-dashboard.json").read_text(encoding="utf-8"))
    assert shipped == tested


def test_the_dashboard_goes_where_the_sidecar_looks_with_its_folder() -> None:
    values = {
        "metrics": {
            "dashboard": {
                "enabled": True,
                "namespace": "monitoring",
                "labels": {"team": "platform"},
                "annotations": {"grafana_folder": "Windows"},
            }
        }
    }
    config_map = find(render(values), "ConfigMap", f"{RELEASE}-dashboard")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["team"] == "platform"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Windows"}
