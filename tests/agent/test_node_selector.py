"""Where a class is applied: a profile's own ``spec.scheduling.nodeSelector`` keeps its
handler off the nodes whose labels it does not match. There the agent writes no table,
restarts nothing for it and reports nothing about it; the labels it judges by are the
Node's as they will be after its own report (capability and guest-build labels included),
so a new node of the right pool takes the class in its first cycle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from wcow_agent.config.state import Paths
from wcow_agent.cycle.decisions import HostFacts, NodeLabels, selected_handlers
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.simulator.containerd import effective_runtimes
from wcow_agent.simulator.faults import Faults
from wcow_agent.simulator.node import HostSettings, SimulatedNode
from wcow_contract.wire.plan_check import EntryRefusedError, checked_entry

GUEST_2019 = "node.runtime.wcow.dev/guest-build-17763"
POOL = "pool.example.com/name"
WS2022 = HostFacts("10.0.20348", True, "1.7.20")


def simulated(tmp_path: Path, **settings: Any) -> tuple[NodeAgent, SimulatedNode]:
    node = SimulatedNode("sim-1", tmp_path / "sim-1", HostSettings(**settings), Faults())
    agent = NodeAgent(
        node.host(),
        Paths(node.config),
        log_root=str(node.root / "logs"),
        timeouts=Timeouts(restart=5.0, cri_poll=0.01),
    )
    return agent, node


def selected(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = hyperv(name, **spec)
    body["spec"]["scheduling"] = {"nodeSelector": selector}
    return body


def on_disk(node: SimulatedNode) -> set[str]:
    return set(effective_runtimes(node.disk_text(), node.settings.containerd_version)[0])


def test_a_class_its_selector_leaves_out_is_neither_written_nor_reported(tmp_path: Path) -> None:
    agent, node = simulated(tmp_path)
    plan = make_plan(hyperv("hv"), selected("pooled", {POOL: "b"}))
    report = agent.reconcile(plan, node=NodeLabels({POOL: "a"}))
    assert set(report.handlers or {}) == {"hv"}
    assert "pooled" not in on_disk(node)
    assert "hv" in on_disk(node)


def test_a_class_its_selector_lets_in_is_applied_and_proven(tmp_path: Path) -> None:
    agent, node = simulated(tmp_path)
    plan = make_plan(selected("pooled", {POOL: "b"}))
    report = agent.reconcile(plan, node=NodeLabels({POOL: "b"}))
    assert (report.handlers or {})["pooled"].state == "Ready"
    assert "pooled" in on_disk(node)


def test_a_guest_build_the_node_boots_selects_it_in_its_first_cycle(tmp_path: Path) -> None:
    """The guest-build label is the agent's own: it is judged as the report will set it,
    before the Node carries it."""
    agent, node = simulated(tmp_path, pause_build="10.0.17763")
    plan = make_plan(selected("old", {GUEST_2019: "true"}, windowsBuild="ltsc2019"))
    report = agent.reconcile(plan, node=NodeLabels({}))
    assert (report.handlers or {})["old"].state == "Ready"
    assert "old" in on_disk(node)


def test_a_pool_of_another_guest_build_restarts_nothing_for_the_class(tmp_path: Path) -> None:
    agent, node = simulated(tmp_path)  # pause image of the host's build: boots 10.0.20348
    plan = make_plan(process())
    agent.reconcile(plan, node=NodeLabels({}))
    restarts = node.restarts
    again = make_plan(process(), selected("old", {GUEST_2019: "true"}, windowsBuild="ltsc2019"))
    report = agent.reconcile(again, node=NodeLabels({}))
    assert node.restarts == restarts
    assert report.result == "unchanged"
    assert set(report.handlers or {}) == {"proc"}


def test_a_label_taken_away_takes_the_class_off_the_node(tmp_path: Path) -> None:
    agent, node = simulated(tmp_path)
    plan = make_plan(process(), selected("pooled", {POOL: "b"}))
    agent.reconcile(plan, node=NodeLabels({POOL: "b"}))
    assert "pooled" in on_disk(node)
    report = agent.reconcile(plan, node=NodeLabels({POOL: "a"}))
    assert "pooled" not in on_disk(node)
    assert "pooled" not in (report.handlers or {})
    assert "proc" in on_disk(node)


def test_stale_guest_build_labels_of_the_agent_do_not_select() -> None:
    """A guest-build label the agent set before, for a pause image it no longer runs, is
    judged gone; one someone else set (a node pool's template) stays."""
    mine = NodeLabels({GUEST_2019: "true"}, reported_guest_builds=["10.0.17763"])
    assert GUEST_2019 not in mine.after_report(WS2022, ["10.0.20348"])
    theirs = NodeLabels({GUEST_2019: "true"}, reported_guest_builds=[])
    assert theirs.after_report(WS2022, ["10.0.20348"])[GUEST_2019] == "true"
    unknown = NodeLabels({GUEST_2019: "true"}, reported_guest_builds=["10.0.17763"])
    assert unknown.after_report(WS2022, None)[GUEST_2019] == "true"  # not known: as it is


def test_without_labels_every_handler_is_a_candidate() -> None:
    """The offline merge has no Node: it judges every handler as if selected."""
    plan = make_plan(selected("pooled", {POOL: "b"}))
    assert set(selected_handlers(plan.handlers, None)) == {"pooled"}
    assert selected_handlers(plan.handlers, {POOL: "a"}) == {}


def test_a_profile_without_a_selector_keeps_its_plan_entry_bytes() -> None:
    """Entries of profiles that set no nodeSelector carry no key for it: their bytes, and so
    the plan's hash, are as released."""
    plain = make_plan(hyperv("hv"))
    document = plain.handlers["hv"].view()
    assert "nodeSelector" not in document
    assert "scheduling" not in document["spec"]


def test_a_forged_selector_is_refused_by_the_agents_check() -> None:
    """The selector travels twice (the spec and the entry): an entry whose selector is not
    what the renderer makes of its spec is refused like any other forged field."""
    plan = make_plan(selected("pooled", {POOL: "b"}))
    entry = json.loads(json.dumps(plan.handlers["pooled"].view()))
    assert entry["nodeSelector"] == {POOL: "b"}
    assert checked_entry("pooled", entry) == plan.handlers["pooled"]
    entry["nodeSelector"] = {POOL: "a"}
    with pytest.raises(EntryRefusedError) as refused:
        checked_entry("pooled", entry)
    assert refused.value.field == "pooled.nodeSelector.pool.example.com/name"
