"""``--pause-image`` sets containerd's pause image key of the file's
schema through the same transaction as a plan change, keeps what it replaced and puts it back
when the flag is dropped or on uninstall."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from tests.agent.test_pacing import NODE, permission, rollout_text
from wcow_agent.cli import build_parser
from wcow_agent.commands.uninstall_command import uninstall
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.sandbox_image import configured_pause_image, with_pause_image
from wcow_agent.config.state import load_state
from wcow_agent.cycle.rollout_gate import Pace

PAUSE_2019 = "mcr.microsoft.com/oss/kubernetes/pause:3.9-windows-ltsc2019-amd64"
V3 = """Version = 3

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "windows"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runhcs-wcow-process"
"""


def pause(text: str | None) -> str | None:
    return configured_pause_image(tomllib.loads(text or ""))


def test_each_schema_gets_its_own_key_and_nothing_else_changes() -> None:
    v2 = with_pause_image(DEFAULT_17, 2, PAUSE_2019)
    changed = [
        (a, b) for a, b in zip(DEFAULT_17.splitlines(), v2.splitlines(), strict=True) if a != b
    ]
    assert changed == [
        ('    sandbox_image = "registry.k8s.io/pause:3.8"', f'    sandbox_image = "{PAUSE_2019}"')
    ]
    v3 = with_pause_image(V3, 3, PAUSE_2019)
    data = tomllib.loads(v3)
    assert data["plugins"]["io.containerd.cri.v1.images"] == {
        "snapshotter": "windows",
        "pinned_images": {"sandbox": PAUSE_2019},
    }
    assert v3.startswith(
        V3.split('[plugins."io.containerd.cri.v1.runtime"', maxsplit=1)[0].rstrip()
    )
    # Taken out again: the table the key needed goes too, the file means what it meant.
    assert tomllib.loads(with_pause_image(v3, 3, None)) == tomllib.loads(V3)
    assert with_pause_image(V3, 3, None) == V3  # nothing to remove: the same bytes
    with pytest.raises(ConfigError, match="version 1"):
        with_pause_image("", 1, PAUSE_2019)


def test_the_flag_sets_the_key_restarts_once_proves_every_handler_and_is_kept(
    node: FakeNode,
) -> None:
    plan = make_plan(hyperv(), process())
    node.agent().reconcile(plan)
    without = node.config.read_text()
    node.restarts.clear()
    runp_before = sum("runp" in c for c in node.crictl_calls)

    report = node.agent_with(pause_image=PAUSE_2019).reconcile(plan)

    assert report.result == "applied"
    assert len(node.restarts) == 1
    assert pause(node.running_text) == PAUSE_2019
    assert report.pause_image == PAUSE_2019
    # Every handler is proven again: each sandbox now starts from the new pause image.
    assert sum("runp" in c for c in node.crictl_calls) - runp_before == 2
    state, _ = load_state(node.root / "config.toml.wcow-state.json")
    assert (state.pause_held, state.pause_previous) == (True, "registry.k8s.io/pause:3.8")
    # Again: nothing to do.
    node.restarts.clear()
    again = node.agent_with(pause_image=PAUSE_2019).reconcile(plan)
    assert (again.result, node.restarts) == ("unchanged", [])

    # The flag dropped: the value it replaced goes back, and the state lets go.
    back = node.agent().reconcile(plan)
    assert back.result == "applied"
    assert node.config.read_text() == without  # byte for byte
    assert pause(node.running_text) == "registry.k8s.io/pause:3.8"
    state, _ = load_state(node.root / "config.toml.wcow-state.json")
    assert not state.pause_held


def test_a_pause_image_containerd_will_not_run_with_is_rolled_back(node: FakeNode) -> None:
    plan = make_plan(hyperv())
    node.agent().reconcile(plan)
    before = node.config.read_text()
    node.faults.refuse = lambda text: "bad pause" if text and PAUSE_2019 in text else None

    report = node.agent_with(pause_image=PAUSE_2019).reconcile(plan)

    assert report.result == "rolled_back"
    assert node.config.read_text() == before
    # The table did not change and containerd runs the previous file again: the handler is
    # proven there again and stays Ready; the node's readiness says what failed (pausing.py).
    assert (report.handlers or {})["hv"].reason == "CanaryPassed"
    change = load_state(node.root / "config.toml.wcow-state.json")[0].pause_change
    assert change is not None
    assert (change.target, change.phase) == (PAUSE_2019, "failed")
    assert "bad pause" in change.reason
    # The same file is not tried again in a loop.
    node.restarts.clear()
    node.agent_with(pause_image=PAUSE_2019).reconcile(plan)
    assert node.restarts == []


def test_with_a_plan_change_the_pause_image_waits_for_the_rollout(node: FakeNode) -> None:
    node.agent().reconcile(make_plan(hyperv()))
    before = node.config.read_text()
    changed = make_plan(hyperv(vm={"processorCount": 4, "memoryMB": 2048}))
    pace = Pace(permission(rollout_text("sha256:other", NODE)), NODE)

    report = node.agent_with(pause_image=PAUSE_2019).reconcile(changed, pace=pace)

    assert report.result == "waiting"
    assert node.config.read_text() == before


def test_uninstall_puts_the_pause_image_back(node: FakeNode, cluster: FakeCluster) -> None:
    node.agent_with(pause_image=PAUSE_2019).reconcile(make_plan(hyperv()))
    assert pause(node.config.read_text()) == PAUSE_2019
    args = build_parser().parse_args(["uninstall", "--config", str(node.config), "--no-kubernetes"])
    assert uninstall(args, {}, lambda a, s: node.host(), lambda: cluster) == 0
    assert tomllib.loads(node.config.read_text()) == tomllib.loads(DEFAULT_17)


def test_the_flag_takes_an_image_reference_only(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "--pause-image", PAUSE_2019])
    assert args.pause_image == PAUSE_2019
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--pause-image", 'x"\n[plugins]'])
