"""deploy/: the kustomize base installs the same objects as the chart's defaults (less what
only Helm uses), and is regenerated from the chart, so the two cannot drift."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.generate import (
    DEPLOY,
    MANIFESTS,
    NAMESPACE,
    UNINSTALL,
    expected_files,
    namespace_object,
)

from tests.conftest import ROOT, SAMPLES
from tests.delivery.helpers import (
    LATEST_KUBE,
    Obj,
    load_yaml_documents,
    normalized,
    render,
    validate_object,
)

KUSTOMIZATION = DEPLOY / "kustomization.yaml"


def kustomize_build(directory: Path = DEPLOY) -> list[Obj]:
    """What `kustomize build` gives for a kustomization that only lists local resources:
    the resources' documents. The test below holds deploy/ to that subset, so this is exact."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    return [
        doc
        for resource in kustomization["resources"]
        for doc in load_yaml_documents(directory / resource)
    ]


def test_kustomization_uses_only_plain_resources() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    listed = {DEPLOY / r for r in kustomization["resources"]}
    assert listed == set(MANIFESTS.glob("*.yaml")), "every manifest listed, nothing else"
    assert not any(SAMPLES in p.parents for p in listed), "profiles need the CRD established first"


def test_kustomize_installs_what_the_chart_installs() -> None:
    """deploy/ is the chart's install; deploy/uninstall/ its pre-delete hook, apart."""
    built = normalized(kustomize_build() + kustomize_build(UNINSTALL))
    chart = normalized(render())
    namespace = ("v1", "Namespace", "", NAMESPACE)
    assert set(built) - set(chart) == {namespace}
    assert set(chart) == set(built) - {namespace}
    for key, obj in chart.items():
        assert built[key] == obj, f"{key} differs between the chart and deploy/"


def test_kustomize_namespace_admits_the_hostprocess_agent() -> None:
    built = kustomize_build()
    namespace = next(o for o in built if o["kind"] == "Namespace")
    assert namespace == namespace_object()
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for obj in built:
        if "namespace" in obj["metadata"]:
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_kustomize_objects_carry_no_helm_bookkeeping() -> None:
    for obj in kustomize_build() + kustomize_build(UNINSTALL):
        labels: dict[str, Any] = obj["metadata"].get("labels", {})
        annotations: dict[str, Any] = obj["metadata"].get("annotations", {})
        assert "helm.sh/chart" not in labels
        assert labels.get("app.kubernetes.io/managed-by") != "Helm"
        assert not any(key.startswith("helm.sh/") for key in annotations)
        validate_object(obj, LATEST_KUBE)


def test_deploy_is_regenerated_from_the_chart() -> None:
    expected = expected_files()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in expected.items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    stale += [
        str(p.relative_to(ROOT))
        for p in [*MANIFESTS.glob("*.yaml"), *UNINSTALL.glob("*.yaml")]
        if p not in expected
    ]
    assert not stale, f"stale: {stale}; run `.venv/bin/python deploy/generate.py`"


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed: real kustomize check skipped"
)
def test_real_kustomize_agrees() -> None:
    """Where kubectl is installed, its built-in kustomize gives the same objects."""
    result = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    real = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert normalized(real) == normalized(kustomize_build())
