"""`wcow-agent merge` as an administrator runs it on a node without Kubernetes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.conftest import SAMPLES
from wcow_agent.cli import main as agent_main
from wcow_agent.cycle.eligibility import Host, classify_handlers
from wcow_contract.catalog.windows_builds import WindowsBuild
from wcow_operator.cli import main as wcow_main

CONFIG = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "configs"
    / "v2-containerd-1.7-default.toml"
)


def merge_args(config: Path, plan: Path, *extra: str) -> list[str]:
    return [
        "merge",
        "--config",
        str(config),
        "--plan",
        str(plan),
        "--host-build",
        "10.0.20348",
        *extra,
    ]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    out = tmp_path / "rendered"
    assert wcow_main(["render", "--out", str(out), str(SAMPLES)]) == 0
    return out / "plan.json"


def test_diff_then_write_then_remove(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    shutil.copy(CONFIG, config)
    original = config.read_bytes()
    args = merge_args(config, plan_file)

    assert agent_main(args) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--- a/config.toml\n+++ b/config.toml\n")
    assert '+[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hyperv-ltsc2022]' in out
    assert "not eligible: hyperv-ltsc2025: guest build 10.0.26100 is newer" in err
    assert config.read_bytes() == original  # a diff only, nothing written

    assert agent_main([*args, "--write"]) == 0
    capsys.readouterr()
    assert config.read_bytes() != original
    assert (tmp_path / "config.toml.wcow-backup").read_bytes() == original
    owned = json.loads((tmp_path / "config.toml.wcow-state.json").read_text())["owned"]
    assert "hyperv-ltsc2022" in owned
    assert "hyperv-ltsc2025" not in owned
    assert not config.read_bytes().startswith(b"\xef\xbb\xbf")  # UTF-8 without BOM

    written = config.read_bytes()
    assert agent_main([*args, "--write"]) == 0
    assert "no change" in capsys.readouterr().err
    assert config.read_bytes() == written

    empty_plan = tmp_path / "empty.json"
    assert (
        wcow_main(["render", "--out", str(tmp_path / "e"), str(SAMPLES / "hyperv-ltsc2025.yaml")])
        == 0
    )
    shutil.copy(tmp_path / "e" / "plan.json", empty_plan)
    assert agent_main([*args[:4], str(empty_plan), *args[5:], "--write"]) == 0
    assert config.read_bytes() == original
    assert not (tmp_path / "config.toml.wcow-original").exists()


def test_utf16_config_from_powershell_is_rewritten_as_utf8(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(CONFIG.read_text().encode("utf-16"))
    args = merge_args(config, plan_file, "--write")
    assert agent_main(args) == 0
    config.read_bytes().decode("utf-8")  # raises if not UTF-8


def test_missing_config_is_never_created_with_only_our_tables(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    args = merge_args(config, plan_file, "--write")
    assert agent_main(args) == 1
    assert "containerd config default" in capsys.readouterr().err
    assert not config.exists()


def test_tampered_plan_is_refused(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file.write_text(plan_file.read_text().replace("2048", "4096"))
    config = tmp_path / "config.toml"
    shutil.copy(CONFIG, config)
    args = merge_args(config, plan_file)
    assert agent_main(args) == 1
    assert "hash does not match" in capsys.readouterr().err


def test_eligibility_by_host_build_and_hyperv() -> None:
    handlers = make_plan(
        hyperv("hv2019", windowsBuild="10.0.17763"),
        hyperv("hv2025", windowsBuild="10.0.26100"),
        process("p2022", windowsBuild="10.0.20348"),
        process("any"),
    ).handlers
    eligible, refused = classify_handlers(
        handlers, Host(WindowsBuild(26100), hyperv_available=True)
    )
    assert sorted(eligible) == ["any", "hv2019", "hv2025", "p2022"]
    eligible, refused = classify_handlers(
        handlers, Host(WindowsBuild(17763), hyperv_available=False)
    )
    assert sorted(eligible) == ["any"]
    assert "Hyper-V is not available" in refused["hv2019"].message
    assert "cannot run build 10.0.20348" in refused["p2022"].message
