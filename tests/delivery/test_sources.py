"""The chart is built from the code, never hand-copied: RBAC from wcow_operator.rbac, the CRD
from crds/ (itself generated from the model), versions and names from the project."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest
import yaml
from deploy.generate import CHART, NAMESPACE, RELEASE, chart_inputs, strip_helm_only

from tests.conftest import ROOT
from tests.delivery.helpers import CRD_FILE, find, render
from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_PATTERN
from wcow_contract.crd import custom_resource_definition
from wcow_operator import rbac

RULES = {
    ("ClusterRole", f"{RELEASE}-operator"): rbac.OPERATOR_CLUSTER_RULES,
    ("ClusterRole", f"{RELEASE}-operator-webhook"): rbac.operator_webhook_rules(
        f"{RELEASE}-operator-webhook"
    ),
    ("Role", f"{RELEASE}-operator"): rbac.OPERATOR_NAMESPACE_RULES,
    ("ClusterRole", f"{RELEASE}-agent"): rbac.AGENT_CLUSTER_RULES,
    ("Role", f"{RELEASE}-agent"): rbac.AGENT_NAMESPACE_RULES,
    ("ClusterRole", f"{RELEASE}-viewer"): rbac.VIEWER_CLUSTER_RULES,
    ("Role", f"{RELEASE}-viewer"): rbac.VIEWER_NAMESPACE_RULES,
    ("ClusterRole", f"{RELEASE}-uninstall"): rbac.UNINSTALL_CLUSTER_RULES,
}


@pytest.mark.parametrize(("kind", "name"), list(RULES), ids=str)
def test_chart_rbac_is_the_generated_rules(kind: str, name: str) -> None:
    role = find(render(), kind, name)
    assert role["rules"] == RULES[kind, name]


def test_chart_grants_nothing_beyond_the_generated_rules() -> None:
    objects = render()
    roles = {
        (o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in ("Role", "ClusterRole")
    }
    assert roles == set(RULES)
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        name = binding["metadata"]["name"]
        component = name.removeprefix(f"{RELEASE}-").split("-")[0]  # operator-webhook: operator
        component = "operator" if component == "uninstall" else component  # the hook's run
        assert binding["roleRef"]["kind"] == binding["kind"].replace("Binding", "")
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"{RELEASE}-{component}", "namespace": NAMESPACE}
        ]
        if binding["kind"] == "RoleBinding":
            assert binding["metadata"]["namespace"] == NAMESPACE


def test_chart_crd_is_the_generated_crd() -> None:
    generated = custom_resource_definition()
    checked_in = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    assert checked_in == generated, "crds/ is stale: run `make crds`"
    chart_crd = strip_helm_only(find(render(), "CustomResourceDefinition"))
    # The chart adds only its labels (which strip_helm_only does not remove) and the keep policy.
    chart_labels = chart_crd["metadata"].pop("labels")
    expected = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    assert expected["metadata"].pop("labels").items() <= chart_labels.items()
    assert chart_crd == expected


def test_chart_inputs_are_up_to_date() -> None:
    """files/crds/ and files/rbac-rules.yaml equal what deploy/generate.py writes from the code."""
    stale = [
        str(path.relative_to(ROOT))
        for path, text in chart_inputs().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale: {stale}; run `.venv/bin/python deploy/generate.py`"


def test_chart_version_is_the_project_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == project["version"]
    assert chart["version"] == project["version"]


def test_values_schema_takes_windows_builds_from_the_catalog() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    builds = schema["properties"]["profiles"]["properties"]["hyperv"]["properties"]["builds"]
    assert builds["items"]["pattern"] == WINDOWS_BUILD_PATTERN


def _schema_keys(schema: dict[str, Any], path: str = "") -> set[str]:
    keys = set()
    for name, child in schema.get("properties", {}).items():
        keys.add(f"{path}{name}")
        if child.get("additionalProperties") is False:
            keys |= _schema_keys(child, f"{path}{name}.")
    return keys


def _value_keys(values: dict[str, Any], schema: dict[str, Any], path: str = "") -> set[str]:
    keys = set()
    for name, value in values.items():
        keys.add(f"{path}{name}")
        child = schema.get("properties", {}).get(name, {})
        if isinstance(value, dict) and child.get("additionalProperties") is False:
            keys |= _value_keys(value, child, f"{path}{name}.")
    return keys


def test_every_value_is_documented_in_values_yaml_and_the_schema() -> None:
    """values.yaml and values.schema.json list the same keys (the schema refuses the rest)."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert _value_keys(values, schema) == _schema_keys(schema) - {"global"}
