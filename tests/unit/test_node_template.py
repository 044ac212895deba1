"""`wcow node-template`: what a node group at zero must advertise for the samples' classes,
and the labels spelt as each cluster-autoscaler provider decodes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import SAMPLES
from tests.unit.test_cli import run
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.labels import STARTUP_TAINT
from wcow_operator.cli import EXIT_INVALID, EXIT_USAGE, load_profiles
from wcow_operator.render.node_template import (
    AZURE_LABEL_TAG,
    LabelNeed,
    NodeTemplate,
    autoscaler_snippets,
    node_template,
)
from wcow_operator.render.runtimeclass import render_runtime_class


def _template(build: str, hyperv: bool) -> NodeTemplate:
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    return node_template([i.profile for i in loaded], parse_windows_build(build), hyperv)


def _served(build: str, hyperv: bool) -> set[str]:
    return {p.profile for p in _template(build, hyperv).served}


def test_which_sample_classes_a_group_serves_follows_build_and_hyperv() -> None:
    # Hyper-V guests up to the host's build; process isolation by hcsshim's rule; the
    # pinned process profile only where its RuntimeClass's windows-build matches.
    assert _served("ltsc2022", True) == {
        "hyperv-ltsc2019", "hyperv-ltsc2022", "hyperv-ltsc2022-reserve", "process-ltsc2022",
        "runhcs-wcow-hypervisor-20348-1vp2gb", "wcow-process",
    }  # fmt: skip
    assert _served("ltsc2019", False) == {"wcow-process"}
    at_2025 = _template("ltsc2025", True)
    assert "hyperv-ltsc2025" in {p.profile for p in at_2025.served}
    pinned = next(p for p in at_2025.placements if p.profile == "process-ltsc2022")
    assert (pinned.reason, "windows-build=10.0.20348" in pinned.message) == (
        "SelectorMismatch",
        True,
    )
    no_hyperv = next(p for p in _template("ltsc2022", False).placements if p.isolation == "HyperV")
    assert no_hyperv.reason == "HyperVUnavailable"


def test_the_template_advertises_every_label_the_served_classes_select() -> None:
    template = _template("ltsc2022", True)
    advertised = {(n.key, n.value) for n in template.labels}
    loaded, _ = load_profiles([str(SAMPLES)])
    for item in loaded:
        if item.profile.name in {p.profile for p in template.served}:
            selector = render_runtime_class(item.profile)["scheduling"]["nodeSelector"]
            # a node built from the template satisfies the RuntimeClass's selector
            assert set(selector.items()) <= advertised, item.profile.name
    by_key = {n.key: n for n in template.labels}
    assert by_key["runtime.wcow.dev/hyperv-ltsc2019"].set_by == "agent"
    assert by_key["kubernetes.io/os"].set_by == "kubelet"
    assert not any(n.key == "runtime.wcow.dev/hyperv-ltsc2025" for n in template.labels)


def _decode_azure(tag: str) -> str:
    # cluster-autoscaler azure_template.go extractLabelsFromTags, step by step
    label = tag.split(AZURE_LABEL_TAG)[1]
    return label.replace("_", "/").replace("~2", "_")


def test_provider_spellings_decode_back_to_the_labels() -> None:
    needs = [
        LabelNeed("runtime.wcow.dev/hv", "ready", "agent", ("hv",)),
        LabelNeed("example.com/pool_name", "win_a", "node-group", ("hv",)),
    ]
    snippets = autoscaler_snippets(needs)
    assert {k.split("node-template/label/")[1]: v for k, v in snippets["aws"].items()} == {
        "runtime.wcow.dev/hv": "ready",
        "example.com/pool_name": "win_a",
    }
    assert {_decode_azure(k): v for k, v in snippets["azure"].items()} == {
        "runtime.wcow.dev/hv": "ready",
        "example.com/pool_name": "win_a",
    }
    assert all("/" not in k for k in snippets["azure"])  # Azure tag names refuse "/"
    (annotation,) = snippets["clusterapi"].values()
    assert dict(pair.split("=", 1) for pair in annotation.split(",")) == {
        "runtime.wcow.dev/hv": "ready",
        "example.com/pool_name": "win_a",
    }


def _profile(name: str, pool: str) -> str:
    return f"""\
apiVersion: runtime.wcow.dev/v1alpha1
kind: WindowsRuntimeProfile
metadata:
  name: {name}
spec:
  isolation: HyperV
  windowsBuild: ltsc2022
  scheduling:
    nodeSelector:
      example.com/pool: {pool}
"""


def test_cli_prints_the_labels_and_the_startup_taint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "node-template", "--profiles", str(SAMPLES), "--host-build", "10.0.20348",
        "--hyperv",
    )  # fmt: skip
    assert code == 0
    assert "runtime.wcow.dev/hyperv-ltsc2022=ready" in out
    assert "hyperv-ltsc2025: HostBuildTooOld" in out
    assert f"{STARTUP_TAINT}=pending:NoSchedule" in out
    assert (
        "k8s.io/cluster-autoscaler/node-template/label/runtime.wcow.dev/wcow-process: ready" in out
    )


def test_cli_yaml_and_json_carry_the_same_decision(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("node-template", "--profiles", str(SAMPLES), "--host-build", "ltsc2019")
    _, as_yaml, _ = run(capsys, *base, "-o", "yaml")
    _, as_json, _ = run(capsys, *base, "-o", "json")
    document = yaml.safe_load(as_yaml)
    assert document == json.loads(as_json)
    assert [c["profile"] for c in document["classes"] if c["serves"]] == ["wcow-process"]
    assert (document["hostBuild"], document["hyperv"]) == ("10.0.17763", False)


def test_two_classes_wanting_different_pools_are_a_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(_profile("a", "blue"))
    (tmp_path / "b.yaml").write_text(_profile("b", "green"))
    code, out, _ = run(
        capsys, "node-template", "--profiles", str(tmp_path), "--host-build", "ltsc2022",
        "--hyperv",
    )  # fmt: skip
    assert code == EXIT_INVALID
    assert "conflict: example.com/pool: blue for a; green for b" in out


def test_bad_host_build_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        capsys, "node-template", "--profiles", str(SAMPLES), "--host-build", "10.0.999"
    )  # fmt: skip
    assert code == EXIT_USAGE
    assert "--host-build: '10.0.999' is not a Windows Server build" in err
