"""The version matrix: a handler that needs more than the node's containerd honours is not
eligible there, with the reason in the Node's status, instead of written and labelled ready."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import CONFIGS, FakeNode
from wcow_agent.cli import main as agent_main
from wcow_agent.config.containerd_lines import LINES, line_for, release_line, unsupported
from wcow_agent.cycle.decisions import build_status
from wcow_agent.cycle.eligibility import Host, classify_handlers
from wcow_contract.catalog.runhcs_options import RUNHCS_OPTIONS
from wcow_contract.catalog.windows_builds import WindowsBuild
from wcow_contract.wire.agent_status import dump_agent_status
from wcow_contract.wire.plan import dump_plan

DEFAULT_16 = (CONFIGS / "v2-containerd-1.6-default.toml").read_text(encoding="utf-8")

RESERVE_VM = {
    "processorCount": 2,
    "memoryMB": 2048,
    "processorLimit": 50000,
    "fullyPhysicallyBacked": True,
}


def test_the_matrix_knows_every_runhcs_option_the_model_knows() -> None:
    newest = LINES[-1]
    assert set(RUNHCS_OPTIONS) <= newest.options
    # containerd 1.6's hcsshim v0.9 lacks exactly fields 18-20.
    assert newest.options - line_for("1.6.39").options == {
        "DefaultContainerAnnotations",
        "NoInheritHostTimezone",
        "ScrubLogs",
    }
    assert line_for("1.7.0").options == newest.options


@pytest.mark.parametrize(
    ("version", "line"),
    [("1.5.9", "1.6"), ("1.6.39", "1.6"), ("1.7.29", "1.7"), ("2.0.0", "2.x"), ("3.1.0", "2.x")],
)
def test_versions_map_to_their_line(version: str, line: str) -> None:
    assert line_for(version).name == line


def test_what_containerd_16_drops_names_the_profile_fields() -> None:
    table = (
        make_plan(hyperv(vm={**RESERVE_VM, "inheritHostTimezone": False})).handlers["hv"].runtime
    )
    dropped = unsupported(table, "1.6.39")
    assert len(dropped) == 1
    for field in (
        "spec.vm.processorLimit",
        "spec.vm.fullyPhysicallyBacked",
        "spec.vm.inheritHostTimezone: false",
    ):
        assert field in dropped[0]
    assert unsupported(table, "1.7.20") == []
    assert unsupported(table, "2.1.5") == []
    assert unsupported({"options": {"ScrubLogs": True}}, "1.6.20") == ["runhcs option ScrubLogs"]
    # A runtime key a line does not read is dropped the same way.
    assert unsupported({"sandboxer": "shim"}, "1.7.20") == ["runtime key sandboxer"]


def test_eligibility_refuses_a_handler_containerd_would_strip() -> None:
    plan = make_plan(hyperv("reserve", vm=RESERVE_VM), hyperv("plain"), process())
    host = Host(WindowsBuild(20348), hyperv_available=True, containerd_version="1.6.39")
    eligible, refused = classify_handlers(plan.handlers, host)
    assert sorted(eligible) == ["plain", "proc"]
    assert refused["reserve"].reason == "ContainerdTooOld"
    assert "containerd 1.6.39" in refused["reserve"].message
    assert "v0.9" in refused["reserve"].message
    assert "upgrade containerd to 1.7 or later" in refused["reserve"].message


def test_on_containerd_16_the_node_reports_it_and_never_writes_it(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, containerd_version="1.6.39", config_text=DEFAULT_16)
    plan = make_plan(hyperv("reserve", vm=RESERVE_VM), hyperv("plain"))

    report = node.agent().reconcile(plan)

    outcomes = report.handlers or {}
    assert (outcomes["reserve"].state, outcomes["reserve"].reason) == (
        "NotEligible",
        "ContainerdTooOld",
    )
    assert outcomes["plain"].state == "Ready"
    assert "reserve" not in node.loaded_runtimes()
    assert "plain" in node.loaded_runtimes()
    status = build_status(report, None, "2026-01-01T00:00:00Z")
    assert status is not None
    annotation = json.loads(dump_agent_status(status))
    assert annotation["handlers"]["reserve"]["reason"] == "ContainerdTooOld"
    assert "spec.vm.processorLimit" in annotation["handlers"]["reserve"]["message"]


def test_after_a_downgrade_to_16_the_table_is_removed(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, containerd_version="1.7.20", config_text=DEFAULT_16)
    plan = make_plan(hyperv("reserve", vm=RESERVE_VM))
    agent = node.agent()
    assert (agent.reconcile(plan).handlers or {})["reserve"].state == "Ready"

    node.containerd_version = "1.6.39"
    report = agent.reconcile(plan)

    assert (report.handlers or {})["reserve"].reason == "ContainerdTooOld"
    assert report.removed == ["reserve"]
    assert "reserve" not in node.loaded_runtimes()


def test_offline_merge_judges_by_containerd_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(dump_plan(make_plan(hyperv("reserve", vm=RESERVE_VM))))
    config = tmp_path / "config.toml"
    shutil.copy(CONFIGS / "v2-containerd-1.6-default.toml", config)
    args = ["merge", "--config", str(config), "--plan", str(plan_file), "--host-build"]
    assert agent_main([*args, "10.0.20348", "--containerd-version", "1.6"]) == 0
    captured = capsys.readouterr()
    assert "not eligible: reserve: containerd 1.6" in captured.err
    assert "reserve" not in captured.out
    assert agent_main([*args, "10.0.20348", "--containerd-version", "1.7"]) == 0
    assert "reserve" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("version", "line"),
    [
        ("1.6.39", "1.6"),
        ("1.7.20", "1.7"),
        ("2.0.0", "2.0"),
        ("2.1.0-rc.1", "2.1"),
        ("2.10.1", "2.10"),
    ],
)
def test_the_line_label_is_major_minor(version: str, line: str) -> None:
    assert release_line(version) == line


@pytest.mark.parametrize("version", ["", "2", "v2.0.0", "2.x.1", "99999.1.0"])
def test_a_version_that_makes_no_label_value_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="not a containerd version"):
        release_line(version)
