"""Render the chart with real Helm (helm-python-sdk: Helm's Go SDK, no helm binary) and look
at the objects a user would get."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy.generate import CHART, NAMESPACE, RELEASE, render_chart, strip_helm_only

from tests import cert_manager, prometheus_operator
from tests.conftest import ROOT
from wcow_contract.errors import parse_profile
from wcow_contract.v1alpha1 import API_VERSION, KIND

Obj = dict[str, Any]

CRD_FILE = ROOT / "crds" / "runtime.wcow.dev_windowsruntimeprofiles.yaml"
# Validated against both ends of what the chart supports (Chart.yaml kubeVersion; the
# admission policy's 1.30) and the newest schemas kubernetes-validate ships.
MIN_KUBE = "1.28"
MIN_KUBE_POLICY = "1.30"
LATEST_KUBE = kubernetes_validate.latest_version()


def render(
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Obj]:
    """Every object the chart renders, in template order."""
    return [
        doc
        for docs in render_chart(values, release=release, namespace=namespace).values()
        for doc in docs
    ]


def render_by_template(values: dict[str, Any] | None = None) -> dict[str, list[Obj]]:
    return render_chart(values)


def notes(values: dict[str, Any] | None = None) -> str:
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def lint(values: dict[str, Any] | None = None, kube_version: str | None = None) -> list[str]:
    """`helm lint --strict`: the errors and warnings (info messages such as 'icon is
    recommended' are not findings)."""
    report = helm_python.lint(CHART, values, strict=True, kube_version=kube_version)
    return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def kinds(objects: Iterable[Obj]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def identity(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def normalized(objects: Iterable[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    """Objects by identity, without what only Helm uses."""
    return {identity(o): strip_helm_only(copy.deepcopy(o)) for o in objects}


def load_yaml_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


# ServiceMonitor is a Prometheus Operator CRD that kubernetes-validate does not know. This
# covers the monitoring.coreos.com/v1 fields the chart writes, closed to typos.
_SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                    },
                },
            },
        },
    },
}


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def validate_object(obj: Obj, version: str) -> None:
    """Validate like the API server would: built-in kinds against the Kubernetes schemas of
    ``version``; our profiles against the CRD's schema and the operator's own model;
    ServiceMonitors against their (partial, closed) schema; the Prometheus Operator's and
    cert-manager's kinds against their CRDs."""
    if obj["apiVersion"] == API_VERSION and obj["kind"] == KIND:
        jsonschema.validate(obj, _crd_spec_schema())
        parse_profile(obj)  # what the operator accepts (raises ProfileInvalidError)
        return
    if obj["apiVersion"] == "monitoring.coreos.com/v1":
        if obj["kind"] == "ServiceMonitor":
            jsonschema.validate(obj, _SERVICE_MONITOR_SCHEMA)
        try:
            crd_schema = prometheus_operator.schema(obj["kind"])
        except prometheus_operator.PrometheusOperatorUnavailableError as error:
            pytest.skip(str(error))
        # Not checked as a schema first: a few of its patterns are Go regexps ("^(?i)...")
        # that Python's re rejects; none of those fields is set here.
        jsonschema.Draft7Validator(crd_schema).validate(obj)
        return
    if obj["apiVersion"] == "cert-manager.io/v1":
        try:
            found = cert_manager.schema(obj["kind"])
        except cert_manager.CertManagerUnavailableError as error:
            pytest.skip(str(error))
        jsonschema.validate(obj, found)
        return
    kubernetes_validate.validate(obj, version, strict=True)
