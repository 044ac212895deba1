"""The agent's own file handling: through symbolic links, keeping who may use the file, and
plan entries checked with the operator's validators before any of them reaches a file."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.agent.conftest import DEFAULT_17, forge, hyperv, make_plan
from tests.agent.fakes import CONFIGS, FakeNode
from wcow_agent.cli import main as agent_main
from wcow_agent.config.files import sweep_temp_files, write_atomically
from wcow_agent.host.filesecurity import PosixFileSecurity, platform_file_security
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.wire.plan import dump_plan

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX modes and links")


def linked_config(tmp_path: Path) -> tuple[Path, Path]:
    """config.toml as a symbolic link into another folder (as some installers lay it out)."""
    real = tmp_path / "real" / "containerd.toml"
    real.parent.mkdir()
    real.write_text(DEFAULT_17)
    link = tmp_path / "etc" / "config.toml"
    link.parent.mkdir()
    link.symlink_to(real)
    return link, real


def test_a_write_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path: Path) -> None:
    link, real = linked_config(tmp_path)

    write_atomically(link, "version = 2\n")

    assert link.is_symlink()
    assert Path(os.readlink(link)) == real
    assert real.read_text() == "version = 2\n"
    assert (link.parent / "config.toml.wcow-backup").read_text() == DEFAULT_17
    assert not list(real.parent.glob(".*.tmp"))


def test_a_link_to_nothing_is_refused_not_created(tmp_path: Path) -> None:
    link = tmp_path / "config.toml"
    link.symlink_to(tmp_path / "missing.toml")
    with pytest.raises(FileNotFoundError, match=r"symbolic link to .*missing\.toml"):
        write_atomically(link, "version = 2\n")
    assert not (tmp_path / "missing.toml").exists()
    assert link.is_symlink()


def test_temp_files_beside_the_target_are_swept(tmp_path: Path) -> None:
    link, real = linked_config(tmp_path)
    leftover = real.with_name(f".{real.name}.abc.tmp")
    leftover.write_text("half")
    assert leftover in sweep_temp_files(link)
    assert not leftover.exists()


def test_the_agent_run_writes_through_a_symlinked_config(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    real = tmp_path / "real.toml"
    node.config.rename(real)
    node.config.symlink_to(real)

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "applied"
    assert node.config.is_symlink()
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hv]' in real.read_text()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600])
def test_the_rewritten_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    config = tmp_path / "config.toml"
    config.write_text(DEFAULT_17)
    config.chmod(mode)

    write_atomically(config, DEFAULT_17 + "\n# more\n")

    assert stat.S_IMODE(config.stat().st_mode) == mode


def test_merge_write_keeps_mode_and_owner_through_a_link(tmp_path: Path) -> None:
    link, real = linked_config(tmp_path)
    real.chmod(0o644)
    before = real.stat()
    plan = tmp_path / "plan.json"
    plan.write_text(dump_plan(make_plan(hyperv())))

    args = ["merge", "--config", str(link), "--plan", str(plan), "--host-build", "10.0.20348"]
    code = agent_main([*args, "--write"])

    assert code == 0
    assert link.is_symlink()
    after = real.stat()
    assert stat.S_IMODE(after.st_mode) == 0o644
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_the_owner_is_kept_when_the_agent_runs_as_root(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(DEFAULT_17)
    os.chown(config, 4321, 4322)

    write_atomically(config, "version = 2\n")

    assert (config.stat().st_uid, config.stat().st_gid) == (4321, 4322)


def test_the_host_layer_copies_security_before_the_rename(tmp_path: Path) -> None:
    """The Windows implementation sits behind the same interface (owner, group, DACL);
    here a recording double shows the write hands it the old file and the temp file."""
    calls: list[tuple[Path, Path, str]] = []

    class Recording:
        def copy(self, source: Path, target: Path) -> None:
            calls.append((source, target, source.read_text()))

    config = tmp_path / "config.toml"
    config.write_text("old\n")
    write_atomically(config, "new\n", security=Recording())

    assert len(calls) == 1
    source, temp, seen = calls[0]
    assert source == config
    assert seen == "old\n", "copied while the old file was still in place"
    assert temp.parent == tmp_path
    assert temp.name.startswith(".config.toml.")
    assert not temp.exists(), "the temp file became config.toml"
    assert isinstance(platform_file_security(), PosixFileSecurity)


# -- plan entries ----------------------------------------------------------------------


def bad_plan(handler: str, **changes: object) -> str:
    entry = make_plan(hyperv()).handlers["hv"].document()
    entry.update(changes)
    return forge({handler: entry})


@pytest.mark.parametrize(
    ("handler", "changes", "field"),
    [
        ("Bad_Handler", {}, "handlers.'Bad_Handler'"),
        ("hv", {"isolation": "Hyperv"}, "handlers.hv.isolation"),
        ("hv", {"windowsBuild": "10.0.x"}, "handlers.hv.windowsBuild"),
        ("hv", {"vm": {"processorCount": 0}}, "handlers.hv.vm.processorCount"),
        ("hv", {"canary": {"timeoutSeconds": 1}}, "handlers.hv.canary.timeoutSeconds"),
        (
            "hv",
            {"runtime": {"runtime_type": "io.containerd.runhcs.v1", "options": {"Bogus": 1}}},
            "handlers.hv.runtime.options.Bogus",
        ),
        (
            "hv",
            {"runtime": {"runtime_type": "io.containerd.runhcs.v1", "options": {"Debug": "yes"}}},
            "handlers.hv.runtime.options.Debug",
        ),
        ("hv", {"runtime": {"runtime_type": "runhcs"}}, "handlers.hv.runtime.runtime_type"),
    ],
)
def test_plan_entries_are_checked_with_the_models_validators(
    handler: str, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(PlanError) as raised:
        load_plan(bad_plan(handler, **changes), "plan.json")
    assert str(raised.value).startswith(f"plan.json: {field}: "), str(raised.value)


def test_merge_names_the_field_of_a_bad_handler_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(bad_plan("bad handler"))
    config = tmp_path / "config.toml"
    shutil.copy(CONFIGS / "v2-containerd-1.7-default.toml", config)

    code = agent_main(
        ["merge", "--config", str(config), "--plan", str(plan), "--host-build", "10.0.20348"]
    )

    err = capsys.readouterr().err
    assert code == 1
    assert "handlers.'bad handler': not a containerd handler name" in err
    assert "Illegal character" not in err
    assert config.read_text() == DEFAULT_17


def test_a_good_plan_still_loads() -> None:
    text = dump_plan(make_plan(hyperv(), hyperv("reserve", vm={"processorLimit": 50000})))
    assert set(load_plan(text).handlers) == {"hv", "reserve"}
    assert json.loads(text)["handlers"]["hv"]["isolation"] == "HyperV"
