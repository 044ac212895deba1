"""The Prometheus Operator's own CRDs, from the module pinned in
tools/prometheus-operator/go.mod (the Go module cache; downloaded from the Go module proxy on
first use). The chart's PrometheusRule and ServiceMonitors are validated against them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.go_modules import GoModuleUnavailableError, module_dir

TOOLS = ROOT / "tools" / "prometheus-operator"
MODULE = "github.com/prometheus-operator/prometheus-operator"
CRD_FOLDER = Path("example") / "prometheus-operator-crd"
CRD_FILES = {
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
}


PrometheusOperatorUnavailableError = GoModuleUnavailableError  # without Go or the module


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of a monitoring.coreos.com/v1 kind the chart renders."""
    path = module_dir(TOOLS, MODULE) / CRD_FOLDER / CRD_FILES[kind]
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found
