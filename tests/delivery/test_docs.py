"""docs/install.md: its examples work against the chart and the kustomize base as they are."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from deploy.generate import CHART, DEPLOY

from tests.conftest import ROOT

DOC = ROOT / "docs" / "install.md"


def _yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _block(marker: str) -> dict[str, Any]:
    block = next(b for b in _yaml_blocks() if marker in b)
    document: dict[str, Any] = yaml.safe_load(block)
    return document


def test_argo_cd_application_installs_this_chart_with_valid_values() -> None:
    app = _block("kind: Application")
    source = app["spec"]["source"]
    assert source["path"] == str(CHART.relative_to(ROOT))
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema(source["helm"]["valuesObject"])
    labels = app["spec"]["syncPolicy"]["managedNamespaceMetadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_every_set_flag_in_the_docs_is_a_chart_value() -> None:
    places = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        (key, value)
        for path in places
        for key, value in re.findall(r"--set ([\w.]+)=(\w+)", path.read_text(encoding="utf-8"))
    ]
    # The install guide's own example must be among them: a pattern that matches nothing
    # would pass without checking anything.
    assert ("profiles.create", "true") in found, "the `--set` pattern finds nothing in the docs"
    with helm_python.Chart.load(CHART) as chart:
        for key, value in found:
            chart.validate_schema(helm_python.parse_set_string(f"{key}={value}"))


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed: overlay example not built"
)
def test_overlay_example_builds_with_real_kustomize(tmp_path: Path) -> None:
    overlay = _block("# my-overlay/kustomization.yaml")
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("docker", "*.py"))
    overlay["resources"] = ["../deploy"]
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        yaml.safe_dump(overlay), encoding="utf-8"
    )
    result = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path / "overlay")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    objects = [o for o in yaml.safe_load_all(result.stdout) if o]
    kinds = {o["kind"] for o in objects}
    assert "ValidatingAdmissionPolicy" not in kinds
    assert "ValidatingAdmissionPolicyBinding" not in kinds
    namespace = next(o for o in objects if o["kind"] == "Namespace")
    assert namespace["metadata"]["name"] == overlay["namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for obj in objects:
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == overlay["namespace"]
    images = {
        c["image"].rsplit(":", 1)[0]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {i["newName"] for i in overlay["images"]}


def test_every_make_target_the_docs_name_exists() -> None:
    """`make X` in the docs and the tools' scripts names a target of the Makefile (the
    control plane's build script once told people to run a `make cluster-clean` there is not)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.MULTILINE))
    places = [
        *(ROOT / name for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md")),
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "tools").rglob("*.sh"),
    ]
    named = {
        (path.relative_to(ROOT).as_posix(), target)
        for path in places
        for target in re.findall(r"`make ([a-z][a-z0-9-]*)", path.read_text(encoding="utf-8"))
    }
    assert named, "no `make` target named anywhere: the pattern is wrong"
    assert {(where, t) for where, t in named if t not in targets} == set()


def test_the_argocd_cm_snippet_is_the_health_check_as_tested() -> None:
    config_map = _block("resource.customizations.health.runtime.wcow.dev_WindowsRuntimeProfile")
    assert config_map["metadata"] == {
        "name": "argocd-cm",
        "namespace": "argocd",
        "labels": {"app.kubernetes.io/part-of": "argocd"},
    }
    script = ROOT / "deploy/argocd/resource_customizations/runtime.wcow.dev"
    lua = (script / "WindowsRuntimeProfile" / "health.lua").read_text(encoding="utf-8")
    key = "resource.customizations.health.runtime.wcow.dev_WindowsRuntimeProfile"
    assert config_map["data"] == {key: lua}


def test_the_flux_example_waits_for_profiles_and_installs_this_chart() -> None:
    block = next(b for b in _yaml_blocks() if "kind: HelmRelease" in b)
    documents = {d["kind"]: d for d in yaml.safe_load_all(block)}
    assert set(documents) == {"GitRepository", "HelmRelease", "Kustomization"}
    chart = documents["HelmRelease"]["spec"]["chart"]["spec"]
    assert (ROOT / chart["chart"] / "Chart.yaml").is_file()
    assert chart["sourceRef"]["name"] == documents["GitRepository"]["metadata"]["name"]
    values = documents["HelmRelease"]["spec"]["values"]
    defaults = yaml.safe_load((ROOT / chart["chart"] / "values.yaml").read_text(encoding="utf-8"))
    assert set(values["agent"]["updateStrategy"]) <= set(defaults["agent"]["updateStrategy"])
    assert documents["Kustomization"]["spec"]["wait"] is True
