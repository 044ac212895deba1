"""The node's pause image decides which guest builds its Hyper-V pods can
boot; a handler of another guest build is not ready there; the canary proves the pod path
(an image pulled through CRI and run under the handler)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import FakeNode
from wcow_agent.config.sandbox_image import configured_pause_image
from wcow_agent.config.state import Paths
from wcow_agent.cycle.canary import CanarySpec
from wcow_agent.cycle.decisions import (
    CycleReport,
    HostFacts,
    build_status,
    guest_builds_of,
    guest_label_changes,
)
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.pause_image import build_of
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.host.crictl import parse_image_os_version
from wcow_agent.host.interfaces import CriError
from wcow_agent.simulator.faults import Faults, parse_fault
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.wire.agent_status import dump_agent_status, parse_agent_status

NANO_2019 = "mcr.microsoft.com/windows/nanoserver:ltsc2019"
NANO_2022 = "mcr.microsoft.com/windows/nanoserver:ltsc2022"
WS2022 = HostFacts("10.0.20348", True, "1.7.20")


def states(report: CycleReport) -> dict[str, tuple[str, str]]:
    return {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()}


def simulated(tmp_path: Path, faults: tuple[str, ...] = (), **settings: Any) -> NodeAgent:
    node = SimulatedNode(
        "sim-1",
        tmp_path / "sim-1",
        HostSettings(**settings),
        Faults.for_node("sim-1", [parse_fault(f) for f in faults]),
    )
    return NodeAgent(
        node.host(),
        Paths(node.config),
        log_root=str(node.root / "logs"),
        timeouts=Timeouts(restart=5.0, cri_poll=0.01),
    )


# -- the decisions --------------------------------------------------------------------------


def test_the_pause_images_build_is_the_one_guest_build_it_boots() -> None:
    assert guest_builds_of("10.0.17763", WS2022) == ["10.0.17763"]
    assert guest_builds_of("10.0.20348", WS2022) == ["10.0.20348"]
    assert guest_builds_of("10.0.26100", WS2022) == []  # a VM newer than its host
    assert guest_builds_of("10.0.17763", HostFacts("10.0.20348", False, None)) == []
    assert guest_builds_of(None, WS2022) == []
    assert build_of("10.0.17763.6659") == "10.0.17763"
    assert build_of("10.0.20348") == "10.0.20348"
    assert build_of("") is None
    assert build_of("6.3.9600") is None


def test_guest_build_labels_change_only_what_the_agent_set() -> None:
    key = "node.runtime.wcow.dev/guest-build-"
    current = {f"{key}17763": "true", f"{key}20348": "true", "other": "x"}
    # 20348 was set by someone else (a node pool template): it stays.
    assert guest_label_changes(current, ["10.0.26100"], ["10.0.17763"]) == {
        f"{key}26100": "true",
        f"{key}17763": None,
    }
    assert guest_label_changes(current, ["10.0.17763"], ["10.0.17763"]) == {}
    assert guest_label_changes(current, None, ["10.0.17763"]) == {}  # not known: no change


def test_the_keys_of_each_config_schema_name_the_pause_image() -> None:
    v2 = {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"sandbox_image": "a:1"}}}
    v3 = {"version": 3, "plugins": {"io.containerd.cri.v1.images": {"pinned_images": {}}}}
    assert configured_pause_image(v2) == "a:1"
    assert configured_pause_image(v3) is None
    v3["plugins"]["io.containerd.cri.v1.images"]["pinned_images"] = {"sandbox": "b:2"}
    assert configured_pause_image(v3) == "b:2"
    assert configured_pause_image({"version": 3, **{k: v for k, v in v2.items() if k != "version"}})
    assert configured_pause_image({"version": 1}) is None


def test_crictl_inspecti_output_gives_os_version(node: FakeNode) -> None:
    from tests.agent.fakes import wire

    document = wire("crictl-inspecti.json", OS_VERSION="10.0.17763.6659", IMAGE="p:1", REPO="p")
    assert parse_image_os_version(document, "p:1") == "10.0.17763.6659"
    with pytest.raises(CriError, match="no image config"):
        parse_image_os_version({"status": {}}, "p:1")
    with pytest.raises(CriError, match="not a version"):
        parse_image_os_version({"info": {"imageSpec": {"os.version": "x" * 100}}}, "p:1")


def test_status_carries_guest_builds_within_schema_version_1() -> None:
    report = CycleReport(facts=WS2022, handlers={}, pause_image="p:1", guest_builds=["10.0.17763"])
    status = build_status(report, None, "2026-11-25T00:00:00Z")
    assert status is not None
    text = dump_agent_status(status)
    assert json.loads(text)["guestBuilds"] == ["10.0.17763"]
    assert json.loads(text)["pauseImage"] == "p:1"
    assert parse_agent_status(text) == status
    # A cycle that could not read the pause image keeps what the last report said.
    again = build_status(CycleReport(facts=WS2022, handlers={}), status, "2026-11-25T00:01:00Z")
    assert again is not None
    assert again.guest_builds == ["10.0.17763"]
    # An older agent's report (no such fields) still reads; a hostile one is refused whole.
    old = json.loads(text)
    del old["guestBuilds"], old["pauseImage"]
    assert parse_agent_status(json.dumps(old)) is not None
    assert parse_agent_status(json.dumps({**old, "guestBuilds": ["17763"]})) is None
    assert parse_agent_status(json.dumps({**old, "guestBuilds": ["10.0.17763"] * 17})) is None


# -- the agent on a node ----------------------------------------------------------------------


def test_a_handler_of_another_guest_build_is_not_ready_and_gets_no_canary(node: FakeNode) -> None:
    plan = make_plan(hyperv(), hyperv("old", windowsBuild="ltsc2019"), process())
    report = node.agent().reconcile(plan)

    assert report.pause_image == "registry.k8s.io/pause:3.8"
    assert report.guest_builds == ["10.0.20348"]
    assert states(report) == {
        "hv": ("Ready", "CanaryPassed"),
        "proc": ("Ready", "CanaryPassed"),
        "old": ("Failed", "GuestBuildUnsupported"),
    }
    message = (report.handlers or {})["old"].message
    assert "guest build 10.0.17763" in message
    assert "pause image registry.k8s.io/pause:3.8 boots 10.0.20348" in message
    assert "node.runtime.wcow.dev/guest-build-17763=true" in message
    runp = [c[c.index("--runtime") + 1] for c in node.crictl_calls if "runp" in c]
    assert sorted(runp) == ["hv", "proc"]  # no canary spent on "old"
    # The pause image was pulled once through CRI, then read from containerd.
    assert next(c for c in node.crictl_calls if "pull" in c)[-1] == "registry.k8s.io/pause:3.8"


def test_a_node_pool_with_a_pause_image_of_the_guest_build_runs_that_class(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    node.image_builds["registry.k8s.io/pause:3.8"] = "10.0.17763.6659"
    report = node.agent().reconcile(make_plan(hyperv(), hyperv("old", windowsBuild="ltsc2019")))
    assert report.guest_builds == ["10.0.17763"]
    assert states(report) == {
        "hv": ("Failed", "GuestBuildUnsupported"),
        "old": ("Ready", "CanaryPassed"),
    }


def test_guest_build_mismatch_on_the_simulated_host(tmp_path: Path) -> None:
    """The simulator reports the pause image's build from its settings and fails what a
    real node fails: a process sandbox of another build, a guest image of another build."""
    agent = simulated(tmp_path, pause_build="10.0.17763")
    canary_2019 = {"enabled": True, "timeoutSeconds": 60, "image": NANO_2019}
    canary_2022 = {"enabled": True, "timeoutSeconds": 60, "image": NANO_2022}
    plan = make_plan(
        hyperv("old", windowsBuild="ltsc2019", canary=canary_2019),
        hyperv("hv", canary=canary_2022),
        process(),
    )
    report = agent.reconcile(plan)
    assert report.guest_builds == ["10.0.17763"]
    found = states(report)
    assert found["old"] == ("Ready", "CanaryPassed")
    assert found["hv"] == ("Failed", "GuestBuildUnsupported")
    # A 17763 pause container cannot run process-isolated on a 20348 host: the agent says
    # so from the pause image's build, without spending a canary (a pool for other classes).
    assert found["proc"] == ("Failed", "GuestBuildUnsupported")
    assert "process isolation cannot run" in (report.handlers or {})["proc"].message
    assert "proc" not in {c.handler for c in report.canaries}
    assert f"{NANO_2019} pulled through CRI and ran" in (report.handlers or {})["old"].message
    # ... and the simulated host fails such a sandbox as a real node would.
    sandbox = agent.canary.run(CanarySpec.from_plan("proc", plan.handlers["proc"], None), None)
    assert (sandbox.passed, sandbox.reason) == (False, "SandboxFailed")
    assert "does not match the host" in sandbox.message


def test_a_guest_image_of_another_build_fails_the_canary(tmp_path: Path) -> None:
    agent = simulated(tmp_path)
    canary = {"enabled": True, "timeoutSeconds": 60, "image": NANO_2019}
    report = agent.reconcile(make_plan(hyperv(canary=canary)))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "CanaryImageFailed")
    assert NANO_2019 in outcome.message
    assert "does not match" in outcome.message


def test_an_image_that_cannot_be_pulled_fails_the_canary(tmp_path: Path) -> None:
    agent = simulated(tmp_path, faults=(f"pull-fail={NANO_2022}",))
    canary = {"enabled": True, "timeoutSeconds": 60, "image": NANO_2022}
    report = agent.reconcile(make_plan(hyperv(canary=canary), process("p2", canary=canary)))
    for handler in ("hv", "p2"):
        outcome = (report.handlers or {})[handler]
        assert (outcome.state, outcome.reason) == ("Failed", "CanaryImagePullFailed"), handler
        assert f"pulling {NANO_2022} through CRI failed" in outcome.message


def test_the_canary_container_is_removed_and_runs_for_process_isolation_too(
    node: FakeNode,
) -> None:
    canary = {"enabled": True, "timeoutSeconds": 60, "image": NANO_2022}
    report = node.agent().reconcile(make_plan(process(canary=canary)))
    outcome = (report.handlers or {})["proc"]
    assert (outcome.state, outcome.reason) == ("Ready", "CanaryPassed")
    assert f"{NANO_2022} pulled through CRI and ran under it" in outcome.message
    created = [doc for kind, doc in node.crictl_inputs if kind == "create"]
    assert created
    assert created[0]["image"] == {"image": NANO_2022}
    (container,) = {cid for _, cid in node.container_ops}
    assert node.container_ops == [("stop", container), ("rm", container)]
    assert node.canary_sandboxes() == []


def test_the_agents_canary_image_per_build_is_used_when_the_profile_names_none(
    tmp_path: Path,
) -> None:
    from wcow_agent.cli import build_parser

    args = build_parser().parse_args(
        ["canary", "hv", "--plan", "p.json", "--canary-image", f"ltsc2019={NANO_2019}"]
    )
    assert args.canary_image == [("10.0.17763", NANO_2019)]
    for bad in ("ltsc2019", "10.0.1=x", f"ltsc2019={NANO_2019.upper()}"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["canary", "hv", "--plan", "p", "--canary-image", bad])

    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    agent = node.agent_with(canary_images={"10.0.20348": NANO_2022, "10.0.17763": NANO_2019})
    own = {"enabled": True, "timeoutSeconds": 60, "image": "example.com/own:1"}
    report = agent.reconcile(make_plan(hyperv(), process(), hyperv("mine", canary=own)))
    assert states(report) == {
        "hv": ("Ready", "CanaryPassed"),
        "proc": ("Ready", "CanaryPassed"),
        "mine": ("Ready", "CanaryPassed"),
    }
    pulled = [c[-1] for c in node.crictl_calls if "pull" in c]
    assert pulled.count(NANO_2022) == 2  # the Hyper-V ltsc2022 handler and the process one
    assert "example.com/own:1" in pulled  # the profile's own image wins
    assert NANO_2019 not in pulled


def test_a_pause_image_that_is_no_image_reference_is_not_handed_to_crictl(
    tmp_path: Path,
) -> None:
    hostile = DEFAULT_17.replace('"registry.k8s.io/pause:3.8"', '"--runtime-endpoint=tcp://x"')
    node = FakeNode(tmp_path, config_text=hostile)
    report = node.agent().reconcile(make_plan(hyperv()))
    assert report.guest_builds is None
    assert not any("inspecti" in c or "pull" in c for c in node.crictl_calls)
    assert any(
        reason == "PauseImageUnknown" and "not an image reference" in message
        for reason, message, _ in report.events
    )
