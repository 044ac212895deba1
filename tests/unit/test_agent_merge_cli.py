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


DIST = Path(__file__).resolve().parent.parent / "fixtures" / "distributions"


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.parent == folder or "conf.d" in p.parts or p.suffix == ".tmpl"
    }


def test_a_2_2_config_gets_the_agents_drop_in_then_loses_it(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file imports C:\\Program Files\\containerd\\conf.d\\*.toml: offline, that folder is
    the one beside the copy (--distribution kubeadm keeps config.toml there)."""
    node = tmp_path / "node"
    node.mkdir()
    config = node / "config.toml"
    shutil.copy(DIST / "swt-containerd-2.2-config.toml", config)
    found = snapshot(node)
    args = merge_args(config, plan_file, "--containerd-version", "2.2")

    assert agent_main(args) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--- /dev/null\n+++ b/conf.d/wcow-runtime.toml\n")
    assert "a/config.toml" not in out
    assert "placement: drop-in (DropInImported)" in err

    assert agent_main([*args, "--write"]) == 0
    drop_in = node / "conf.d" / "wcow-runtime.toml"
    assert "hyperv-ltsc2022" in drop_in.read_text(encoding="utf-8")
    assert config.read_bytes() == found["config.toml"]

    remove = [a for a in args if a not in ("--plan", str(plan_file))]
    assert agent_main([*remove, "--remove", "--write"]) == 0
    assert snapshot(node) == found


def test_a_root_that_imports_nothing_gains_the_import_of_the_given_folder(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    shutil.copy(DIST / "aks-ws2025-containerd-2.0-config.toml", config)
    found = snapshot(tmp_path)
    args = merge_args(
        config,
        plan_file,
        "--containerd-version",
        "2.0",
        "--distribution",
        "aks",
        "--drop-in-config",
        str(tmp_path / "conf.d"),
    )

    assert agent_main(args) == 0
    out = capsys.readouterr().out
    assert "+imports = ['C:\\Program Files\\containerd\\conf.d\\*.toml']" in out
    assert "+++ b/conf.d/wcow-runtime.toml" in out

    assert agent_main([*args, "--write"]) == 0
    assert agent_main([*args, "--remove", "--write"]) == 0
    assert snapshot(tmp_path) == found


def test_rke2_gets_its_template(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    rendered = (DIST / "rke2-windows-config.toml").read_text(encoding="utf-8")
    config.write_text(
        "".join(row for row in rendered.splitlines(True) if not row.startswith("imports")),
        encoding="utf-8",
    )
    args = merge_args(config, plan_file, "--containerd-version", "2.2.6", "--distribution", "rke2")

    assert agent_main(args) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--- /dev/null\n+++ b/config-v3.toml.tmpl\n")
    assert '+{{ template "base" . }}' in out
    assert "placement: template (RenderedFromTemplate)" in err


def test_the_preset_names_the_drop_in_folder_as_the_agent_has_it(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --drop-in-config, the distribution's preset (the one ``run`` uses) gives the
    folder: conf.d beside config.toml on AKS, as containerd 2.2's own default imports."""
    config = tmp_path / "config.toml"
    shutil.copy(DIST / "aks-ws2025-containerd-2.0-config.toml", config)
    args = merge_args(config, plan_file, "--containerd-version", "2.0", "--distribution", "aks")

    assert agent_main(args) == 0
    out = capsys.readouterr().out
    assert "+imports = ['C:\\Program Files\\containerd\\conf.d\\*.toml']" in out
    assert "+++ b/conf.d/wcow-runtime.toml" in out


def test_an_rke2_node_with_only_the_version_2_template_gets_that_one(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """k3s renders from config-v3.toml.tmpl, else config.toml.tmpl: a node that has only the
    latter gets the tables there, and keeps what its owner wrote in it."""
    config = tmp_path / "config.toml"
    rendered = (DIST / "rke2-windows-config.toml").read_text(encoding="utf-8")
    config.write_text(
        "".join(row for row in rendered.splitlines(True) if not row.startswith("imports")),
        encoding="utf-8",
    )
    template = tmp_path / "config.toml.tmpl"
    template.write_text('{{ template "base" . }}\n# the owner\'s own line\n', encoding="utf-8")
    args = merge_args(config, plan_file, "--containerd-version", "2.2.6", "--distribution", "rke2")

    assert agent_main([*args, "--write"]) == 0
    written = template.read_text(encoding="utf-8")
    assert written.startswith('{{ template "base" . }}\n# the owner\'s own line\n')
    assert "hyperv-ltsc2022" in written
    assert not (tmp_path / "config-v3.toml.tmpl").exists()
    assert "placement: template" in capsys.readouterr().err


def test_schema_1_files_by_containerd_line(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    shutil.copy(DIST / "aks-ws2022-containerd-1.7-config.toml", config)

    assert agent_main(merge_args(config, plan_file, "--containerd-version", "1.7.20")) == 0
    assert "+[plugins.cri.containerd.runtimes.hyperv-ltsc2022]" in capsys.readouterr().out

    assert agent_main(merge_args(config, plan_file, "--containerd-version", "2.2")) == 1
    assert "config.toml has schema 1" in capsys.readouterr().err


def test_a_plan_is_needed_unless_removing(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    shutil.copy(CONFIG, config)
    args = ["merge", "--config", str(config), "--host-build", "10.0.20348"]
    assert agent_main(args) == 2
    assert agent_main([*args, "--remove"]) == 0
