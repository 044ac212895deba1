"""`wcow` as a user runs it: outputs, exit codes, error messages, nothing written on error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import SAMPLES
from wcow_operator.cli import EXIT_INVALID, EXIT_USAGE, main

GOOD = """\
apiVersion: runtime.wcow.dev/v1alpha1
kind: WindowsRuntimeProfile
metadata:
  name: hv
spec:
  isolation: HyperV
  windowsBuild: ltsc2022
"""

BAD = """\
apiVersion: runtime.wcow.dev/v1alpha1
kind: WindowsRuntimeProfile
metadata:
  name: broken
spec:
  isolation: HyperV
  windowsBuild: ltsc2022
  vm:
    memoryMB: 1023
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_render_to_stdout_is_applyable_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(SAMPLES))
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in documents]
    assert kinds.count("RuntimeClass") == len(list(SAMPLES.glob("*.yaml")))
    assert kinds[-1] == "ConfigMap"
    config_map = documents[-1]
    assert config_map["metadata"]["namespace"] == "wcow-system"
    plan = json.loads(config_map["data"]["plan.json"])
    assert set(plan["handlers"]) == {d["handler"] for d in documents if d["kind"] == "RuntimeClass"}


def test_render_namespace_flag(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "render", "--namespace", "ops", str(SAMPLES))
    assert list(yaml.safe_load_all(out))[-1]["metadata"]["namespace"] == "ops"


def test_render_out_writes_the_four_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "rendered"
    code, _, err = run(capsys, "render", "--out", str(out), str(SAMPLES))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "containerd-config-v2.toml",
        "containerd-config-v3.toml",
        "plan.json",
        "runtimeclasses.yaml",
    ]
    assert tomllib.loads((out / "containerd-config-v2.toml").read_text())["version"] == 2
    assert tomllib.loads((out / "containerd-config-v3.toml").read_text())["version"] == 3
    assert json.loads((out / "plan.json").read_text())["kind"] == "RuntimePlan"
    assert f"rendered {len(list(SAMPLES.glob('*.yaml')))} profile(s)" in err


def test_invalid_profile_names_file_profile_field_and_value_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    out = tmp_path / "rendered"
    code, stdout, err = run(capsys, "render", "--out", str(out), str(tmp_path))
    assert code == EXIT_INVALID
    assert stdout == ""
    assert not out.exists()
    assert f"{tmp_path / 'bad.yaml'} (document 1): profile 'broken': spec.vm.memoryMB:" in err
    assert "(got 1023)" in err


def test_render_refuses_a_string_where_the_api_server_wants_a_boolean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`fullyPhysicallyBacked: "yes"` used to render a physically backed VM; the API server
    refuses the same profile (not a boolean), so `wcow render` and `validate` do too."""
    (tmp_path / "yes.yaml").write_text(GOOD + '  vm:\n    fullyPhysicallyBacked: "yes"\n')
    for command in ("render", "validate"):
        code, stdout, err = run(capsys, command, str(tmp_path))
        assert code == EXIT_INVALID
        assert stdout == ""
        assert "profile 'hv': spec.vm.fullyPhysicallyBacked: must be true or false" in err
        assert "(got 'yes')" in err


def test_multi_document_files_and_foreign_objects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"
    second = GOOD.replace("name: hv", "name: hv2")
    (tmp_path / "all.yaml").write_text(f"{other}---\n{GOOD}---\n{second}---\n")
    code, out, _ = run(capsys, "validate", str(tmp_path / "all.yaml"))
    assert code == 0
    assert out.splitlines() == ["ok: hv (handler hv)", "ok: hv2 (handler hv2)"]


def test_duplicate_names_and_handlers_are_conflicts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == EXIT_INVALID
    assert f"{tmp_path / 'b.yaml'}: profile 'hv' is also defined in {tmp_path / 'a.yaml'}" in err

    (tmp_path / "b.yaml").write_text(GOOD.replace("name: hv", "name: other") + "  handler: hv\n")
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == EXIT_INVALID
    assert "handler 'hv' is claimed by profiles hv, other" in err


def test_wrong_api_version_and_broken_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "old.yaml").write_text(GOOD.replace("v1alpha1", "v1beta9"))
    (tmp_path / "broken.yaml").write_text("spec: [unclosed\n")
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == EXIT_INVALID
    assert "apiVersion 'runtime.wcow.dev/v1beta9' is not supported" in err
    assert f"{tmp_path / 'broken.yaml'}: not valid YAML" in err


def test_no_profiles_found_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    code, _, err = run(capsys, "render", str(tmp_path))
    assert code == EXIT_INVALID
    assert "no WindowsRuntimeProfile" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "render", str(tmp_path / "missing.yaml"))
    assert code == EXIT_USAGE
    assert "no such file or directory" in err
    code, _, _ = run(capsys, "render", "--bogus", str(SAMPLES))
    assert code == EXIT_USAGE


def test_crd_command_prints_the_checked_in_crd(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "crd")
    assert code == 0
    assert yaml.safe_load(out)["kind"] == "CustomResourceDefinition"


def test_console_scripts_are_installed() -> None:
    bindir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bindir / "wcow"), "validate", str(SAMPLES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    result = subprocess.run(
        [str(bindir / "wcow-operator"), "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "--resync-seconds" in result.stdout
    env = {"PATH": os.environ.get("PATH", "")}  # no namespace anywhere
    result = subprocess.run(
        [str(bindir / "wcow-operator")], capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 2
    assert "no namespace for the plan ConfigMap" in result.stderr
