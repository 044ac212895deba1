"""The paced rollout on the real control plane (``make e2e``): ``wcow-operator`` and 20
simulated Windows nodes running the real agent loop.

Judged from the nodes' own reports and the simulated hosts' journals (when each agent
preflighted, restarted containerd and ran its canaries), never from the operator's word:

- a good change reaches every node, never more than maxUnavailable applying at once;
- a bad change stops after at most maxUnavailable nodes; the others keep their config.toml
  and their ready label; the change is held back, so the nodes that took it go back to the
  last one; the profile says RolledOut=False RolloutHalted naming the node, and a Warning
  event RolloutHalted is posted;
- another profile's change made while one is held back reaches every node; fixing the held
  profile's spec then rolls it out everywhere;
- fixing the spec resumes it; so does the resume annotation after a node fault is repaired;
- deleting the profile removes its table and label from every node, paced too;
- the operator SIGKILLed mid-rollout: no node starts applying without permission while it is
  down, and a new operator finishes the rollout without exceeding maxUnavailable;
- what GitOps tools make of the live profile: kstatus's rules (tests/kstatus.py, as Flux's
  `wait: true` reads it) say InProgress while rolling, Failed when halted, Current when done;
  the Argo CD health check (run by Lua) says Progressing, Degraded and Healthy.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argocd import health
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
)
from tests.fleet.harness import Operator, View, running_fleet, running_operator
from tests.fleet.paced import (
    BAD_CHANGE,
    MEMORY,
    annotate_resume,
    appliers,
    apply_windows,
    events,
    every_node_on,
    fleet_summary,
    halted,
    new_plan,
    patch_spec,
    peak_overlap,
    plan_hash,
    reached,
    read_rollout,
    rolled_out,
    settle,
    until,
)
from tests.kstatus import compute
from wcow_agent.simulator.fleet import Fleet
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.wire.rollout import RESUME_ANNOTATION

pytestmark = pytest.mark.e2e

NODES = 20
# The operator's default for changes no profile limits: 15% of 20 nodes = 3.
FLEET_MAX = "15%"
FLEET_LIMIT = 3
# The profile's own spec.rollout.maxUnavailable, lower: it wins for changes to it.
PROFILE_LIMIT = 2
CANARY_SECONDS = 0.3  # long enough that two nodes let in together overlap
RULE_STALLED = "the first True of Reconciling/Stalled in status.conditions is Stalled"


def kstatus(view: View, name: str) -> str:
    body = view.profile(name)
    assert body is not None, name
    return compute(body)[0]


def current(view: View, name: str) -> dict[str, Any] | None:
    """The live profile once kstatus reads it Current."""
    body = view.profile(name)
    return body if body is not None and compute(body)[0] == "Current" else None


def stalled(body: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == "Stalled")


def hyperv_profile(name: str, memory: int) -> dict[str, object]:
    return profile(
        name,
        isolation="HyperV",
        windowsBuild="ltsc2022",
        vm={"processorCount": 2, "memoryMB": memory},
        rollout={"maxUnavailable": PROFILE_LIMIT},
    )


@dataclass
class Paced:
    """The operator and 20 nodes running one HyperV profile (2048 MB) on its first plan."""

    operator: Operator
    fleet: Fleet
    view: View
    ns: str
    hv: str
    first: str
    names: list[str]
    kube: client.ApiClient

    def explain(self) -> str:
        return fleet_summary(self.view, self.kube, self.ns, self.hv)


@contextlib.contextmanager
def paced_fleet(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> Iterator[Paced]:
    hv = f"{prefix}-hv"
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig,
            ns,
            tmp_path / "operator.log",
            "--max-unavailable",
            FLEET_MAX,
            "--rollout-timeout-seconds",
            "120",
        ) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, f"{prefix}w", NODES, canary_seconds=CANARY_SECONDS
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        names = sorted(fleet.nodes)
        operator.until(
            "every simulated node's first report",
            lambda: all(view.agent_status(n) is not None for n in names),
        )
        client.CustomObjectsApi(kube).create_cluster_custom_object(
            GROUP, VERSION, PLURAL, hyperv_profile(hv, 2048)
        )
        new_plan(operator, kube, ns, None)
        first = operator.until(
            f"{hv} on every node", lambda: reached(view, kube, ns, hv, (MEMORY, 2048))
        )
        yield Paced(operator, fleet, view, ns, hv, first, names, kube)


def test_good_change_paced_fault_halts_resume_annotation_resumes_deletion_paced(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    with paced_fleet(kube, kubeconfig, prefix, tmp_path) as paced:
        operator, fleet, view, ns = paced.operator, paced.fleet, paced.view, paced.ns
        hv, names = paced.hv, paced.names
        explain, first = paced.explain, paced.first
        custom = client.CustomObjectsApi(kube)
        # (a) A good change reaches every node, at most PROFILE_LIMIT applying at once.
        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        new_plan(operator, kube, ns, first)
        seen: set[str] = set()

        def watched() -> str | None:
            seen.add(kstatus(view, hv))
            return reached(view, kube, ns, hv, (MEMORY, 3072))

        good = until(operator, "3072 MB on every node", watched, explain)
        assert "InProgress" in seen, seen  # Flux waits while nodes take the change
        assert "Failed" not in seen, seen
        done = operator.until(f"{hv} kstatus Current", lambda: current(view, hv))
        assert health(done)["status"] == "Healthy", health(done)
        windows = apply_windows(fleet.nodes, since)
        assert sorted(w.node for w in windows) == names, windows  # each node applied once
        assert peak_overlap(windows) <= PROFILE_LIMIT, windows
        # Pacing lets PROFILE_LIMIT in together, not one by one.
        assert peak_overlap(windows) == PROFILE_LIMIT, windows
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.plan_hash == good
        assert rollout.max_unavailable == PROFILE_LIMIT
        assert rollout.changed_handlers == [hv]
        assert rollout.halted is None

        # (c') A node fault halts a change; repaired, the resume annotation resumes it.
        broken = names[6]
        fleet.nodes[broken].faults.canary_fail.add(hv)
        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 5120}})
        resumable = new_plan(operator, kube, ns, good)
        stop = operator.until(f"{hv} halted by {broken}", lambda: halted(view, hv))
        assert broken in stop["message"], stop["message"]
        body = view.profile(hv)
        assert body is not None
        assert compute(body) == ("Failed", RULE_STALLED), body["status"]
        assert stalled(body)["reason"] == "RolloutHalted"
        assert broken in stalled(body)["message"]
        argo = health(body)
        assert argo["status"] == "Degraded", argo
        assert argo["message"].startswith("RolloutHalted: "), argo
        assert "resume-rollout" in argo["message"], argo
        settle(3.0)
        # Let in by name, PROFILE_LIMIT busy at a time. How far it got depends on whether a
        # slot freed before the broken node's failure arrived (handed over at once), so the
        # test judges the order and the stop, not the count: the nodes that tried the change
        # are the first ones by name (a node let in that had not started yet when the
        # change was held back never tries it), the rest never did.
        held = read_rollout(kube, ns)
        assert held is not None
        assert hv in held.held, held
        assert held.held[hv].plan_hash == resumable
        tried = appliers(fleet.nodes, since)  # the change, and going back from it
        assert broken in tried
        last = max(names.index(n) for n in tried)
        assert len(set(names[: last + 1]) - tried) < PROFILE_LIMIT, tried
        untouched = names[last + 1 :]
        assert untouched, "the hold stopped no node"
        for name in untouched:
            assert view.labels(name).get(ready_label(hv)) == READY_VALUE, name
        fleet.nodes[broken].faults.canary_fail.discard(hv)
        settle(3.0)  # the agent retries on its own; the change stays held until resumed
        assert halted(view, hv) is not None
        assert appliers(fleet.nodes, since) == tried, "the held change went on"
        resumed_at = time.time()
        annotate_resume(kube, hv, "1")
        until(
            operator,
            "the resumed rollout on every node",
            lambda: reached(view, kube, ns, hv, (MEMORY, 5120)) == resumable,
            explain,
        )
        assert {w.node for w in apply_windows(fleet.nodes, since)} == set(names)
        # Paced from the resume on. (Counted from it: the broken node proves its failed
        # handler again each cycle without a new config, and a window runs from a preflight
        # to the last host step before the next one, so its window from before the resume
        # would stretch over those canaries, which restart nothing.)
        windows = apply_windows(fleet.nodes, resumed_at)
        assert peak_overlap(windows) <= PROFILE_LIMIT, windows
        resumed = operator.until(f"{hv} kstatus Current again", lambda: current(view, hv))
        assert stalled(resumed)["status"] == "False", resumed["status"]
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.resumed_by is not None
        assert f"{hv}=1" in rollout.resumed_by

        # (d) Deleting the profile: its table and label leave every node, paced by the
        # operator's limit (the profile's own went with it).
        since = time.time()
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, hv)
        gone = new_plan(operator, kube, ns, resumable)
        until(
            operator,
            f"{hv}'s table and label gone from every node",
            lambda: all(
                hv not in view.disk_runtimes(n)
                and ready_label(hv) not in view.labels(n)
                and applied_or_none(view, n) == gone
                for n in names
            ),
            explain,
        )
        windows = apply_windows(fleet.nodes, since)
        assert {w.node for w in windows} == set(names)
        assert peak_overlap(windows) <= FLEET_LIMIT, windows
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.plan_hash == gone
        assert rollout.max_unavailable == FLEET_LIMIT
        for name, sim in fleet.nodes.items():
            assert sim.running_text == sim.disk_text(), name


def test_bad_change_stops_after_max_unavailable_nodes(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    with paced_fleet(kube, kubeconfig, prefix, tmp_path) as paced:
        operator, fleet, view, ns = paced.operator, paced.fleet, paced.view, paced.ns
        hv, names = paced.hv, paced.names
        good = paced.first
        # (b) A bad change: a shim path where no node has the shim; every canary fails. It
        # stops after at most PROFILE_LIMIT nodes.
        before = {n: fleet.nodes[n].disk_text() for n in names}
        since = time.time()
        patch_spec(kube, hv, BAD_CHANGE)
        bad = new_plan(operator, kube, ns, good)
        stop = operator.until(f"{hv} RolloutHalted", lambda: halted(view, hv))
        settle(3.0)
        tried = appliers(fleet.nodes, since)
        assert 1 <= len(tried) <= PROFILE_LIMIT, tried
        named = {n for n in names if n in stop["message"]}
        assert named, stop["message"]
        assert named <= tried, (named, tried)
        # The change is held back: the plan goes back to the last one (byte for byte), and
        # the nodes that took the change go back to it, paced like any change.
        until(
            operator,
            "the held-back change off every node",
            lambda: plan_hash(kube, ns) == good and every_node_on(view, hv, good, (MEMORY, 2048)),
            paced.explain,
        )
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.halted is None
        assert rollout.held[hv].plan_hash == bad
        assert (rollout.held[hv].entry or {}).get("generation") == 1
        for name in sorted(set(names) - tried):
            assert fleet.nodes[name].disk_text() == before[name], f"{name} changed config.toml"
            assert view.labels(name).get(ready_label(hv)) == READY_VALUE, name
            assert applied_or_none(view, name) == good, name
        body = view.profile(hv)
        assert body is not None
        assert body["status"]["rollout"]["state"] == "Halted", body["status"]
        assert compute(body) == ("Failed", RULE_STALLED), body["status"]
        assert health(body)["status"] == "Degraded", health(body)
        notes = events(kube, hv, "RolloutHalted")
        assert notes, "no RolloutHalted event"
        assert all(e["type"] == "Warning" for e in notes), notes
        settle(2.0)
        assert appliers(fleet.nodes, since) == tried, "the halted rollout went on"
        # The operator's log says so once, with the reason (not once per pass).
        log = operator.log.read_text(encoding="utf-8", errors="replace").splitlines()
        halts = [line for line in log if f"rollout of plan {bad} halted" in line]
        assert len(halts) == 1, halts
        assert "NodeFailed" in halts[0], halts[0]
        assert any(n in halts[0] for n in named), halts[0]


def test_fixing_the_spec_resumes_a_halted_rollout(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    with paced_fleet(kube, kubeconfig, prefix, tmp_path) as paced:
        operator, fleet, view, ns = paced.operator, paced.fleet, paced.view, paced.ns
        hv, names = paced.hv, paced.names
        explain = paced.explain
        patch_spec(kube, hv, BAD_CHANGE)
        bad = new_plan(operator, kube, ns, paced.first)
        operator.until(f"{hv} RolloutHalted", lambda: halted(view, hv))
        # (c) Fixing the spec (and changing the memory, so every node has to apply): a new
        # plan, a new rollout, completed at the same pace.
        since = time.time()
        patch_spec(
            kube,
            hv,
            {"containerd": {"runtimePath": None}, "vm": {"memoryMB": 4096}},
        )
        new_plan(operator, kube, ns, bad)
        until(
            operator,
            "the fixed spec on every node",
            lambda: reached(view, kube, ns, hv, (MEMORY, 4096)),
            explain,
        )
        windows = apply_windows(fleet.nodes, since)
        assert {w.node for w in windows} == set(names)
        assert peak_overlap(windows) <= PROFILE_LIMIT, windows


def renamed_everywhere(paced: Paced, handler: str, gone: str, hash_: str | None) -> str | None:
    """The plan's hash once every node applied it, runs ``handler`` labelled ready and has no
    ``gone`` table, and the profile says RolledOut for it on every node."""
    view = paced.view
    if not hash_ or rolled_out(view, paced.hv, hash_, NODES) is None:
        return None
    for name, sim in paced.fleet.nodes.items():
        runtimes = view.disk_runtimes(name)
        if handler not in runtimes or gone in runtimes or sim.running_text != sim.disk_text():
            return None
        if applied_or_none(view, name) != hash_:
            return None
        if view.labels(name).get(ready_label(handler)) != READY_VALUE:
            return None
    return hash_


def test_renaming_a_failing_handler_resumes_without_an_annotation(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """A new handler that fails its canary halts after at most
    maxUnavailable nodes; naming a working handler instead is a new plan whose rollout the
    old handler's failures (still reported by the first nodes) do not halt."""
    with paced_fleet(kube, kubeconfig, prefix, tmp_path) as paced:
        operator, fleet, view, ns = paced.operator, paced.fleet, paced.view, paced.ns
        hv, names = paced.hv, paced.names
        bad_handler, good_handler = f"{hv}-bad", f"{hv}-good"
        since = time.time()
        patch_spec(kube, hv, {"handler": bad_handler, **BAD_CHANGE})
        bad = new_plan(operator, kube, ns, paced.first)
        stop = operator.until(f"{hv} RolloutHalted", lambda: halted(view, hv))
        settle(2.0)
        tried = appliers(fleet.nodes, since)
        assert 1 <= len(tried) <= PROFILE_LIMIT, tried
        assert any(n in stop["message"] for n in tried), stop["message"]
        since = time.time()
        patch_spec(kube, hv, {"handler": good_handler, "containerd": {"runtimePath": None}})
        new_plan(operator, kube, ns, bad)
        until(
            operator,
            f"{good_handler} on every node",
            lambda: renamed_everywhere(paced, good_handler, bad_handler, plan_hash(kube, ns)),
            paced.explain,
        )
        body = view.profile(hv) or {}
        annotations = body["metadata"].get("annotations") or {}
        assert RESUME_ANNOTATION not in annotations, annotations
        windows = apply_windows(fleet.nodes, since)
        assert {w.node for w in windows} == set(names)
        assert peak_overlap(windows) <= PROFILE_LIMIT, windows


def applied_or_none(view: View, name: str) -> str | None:
    return (view.agent_status(name) or {}).get("appliedPlanHash")


def test_operator_killed_mid_rollout_no_node_applies_without_permission(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    hv = f"{prefix}-hv"
    custom = client.CustomObjectsApi(kube)
    flags = ("--max-unavailable", FLEET_MAX, "--rollout-timeout-seconds", "120")
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_fleet(
            kubeconfig,
            tmp_path / "fleet",
            ns,
            f"{prefix}w",
            NODES,
            canary_seconds=1.0,  # ten waves of about a second: time to kill mid-way
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),  # strips the finalizer if no operator is left
    ):
        view = View(kube, [fleet])
        names = sorted(fleet.nodes)
        with running_operator(kubeconfig, ns, tmp_path / "first.log", *flags) as first:
            first.until(
                "every simulated node's first report",
                lambda: all(view.agent_status(n) is not None for n in names),
            )
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, hyperv_profile(hv, 2048))
            new_plan(first, kube, ns, None)
            start = first.until(
                f"{hv} on every node",
                lambda: reached(view, kube, ns, hv, (MEMORY, 2048)),
            )
            since = time.time()
            patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
            change = new_plan(first, kube, ns, start)
            first.until(
                "four nodes through their canaries",
                lambda: (
                    len({w.node for w in apply_windows(fleet.nodes, since) if w.seconds > 0.9}) >= 4
                ),
            )
            first.process.kill()  # SIGKILL: no goodbye, no last write
            first.process.wait(timeout=10)
            killed = time.time()
        permitted = read_rollout(kube, ns)
        assert permitted is not None
        assert permitted.plan_hash == change
        allowed = set(permitted.permitted)
        assert len(allowed) < NODES, "the rollout had finished before the kill"
        settle(5.0)
        down = time.time()
        during = {w.node for w in apply_windows(fleet.nodes, killed) if w.start <= down}
        assert during <= allowed, f"applied without permission: {sorted(during - allowed)}"
        assert appliers(fleet.nodes, since, down) <= allowed
        for name in sorted(set(names) - allowed):
            assert applied_or_none(view, name) == start, name
            table = view.disk_runtimes(name)[hv]
            assert table["options"][MEMORY] == 2048, name
        assert read_rollout(kube, ns) == permitted, "someone wrote the rollout meanwhile"

        with running_operator(kubeconfig, ns, tmp_path / "second.log", *flags) as second:
            second.until(
                "the rollout finished by the new operator",
                lambda: reached(view, kube, ns, hv, (MEMORY, 3072)) == change,
            )
            windows = apply_windows(fleet.nodes, since)
            assert sorted(w.node for w in windows) == names, windows
            assert peak_overlap(windows) <= PROFILE_LIMIT, windows
            assert plan_hash(kube, ns) == change
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, hv)
            second.until(
                f"{hv}'s table gone from every node",
                lambda: all(hv not in view.disk_runtimes(n) for n in names),
            )


def test_a_failing_profile_holds_back_only_itself(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """Profile A's change fails on the first nodes and is held back (they
    go back to A's last version); profile B's change made meanwhile reaches every node while
    A stays held; fixing A's spec then rolls A out to every node."""
    with paced_fleet(kube, kubeconfig, prefix, tmp_path) as paced:
        operator, fleet, view, ns = paced.operator, paced.fleet, paced.view, paced.ns
        a, names, explain = paced.hv, paced.names, paced.explain
        b = f"{prefix}-b"
        custom = client.CustomObjectsApi(kube)
        with profiles_cleaned_up(kube, [b]):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, hyperv_profile(b, 2048))
            both = until(
                operator,
                f"{b} on every node",
                lambda: reached(view, kube, ns, b, (MEMORY, 2048)),
                explain,
            )
            # A's change fails on every node it reaches: held back after the first ones.
            since = time.time()
            patch_spec(kube, a, BAD_CHANGE)
            bad = new_plan(operator, kube, ns, both)
            stop = until(operator, f"{a} RolloutHalted", lambda: halted(view, a), explain)
            tried = appliers(fleet.nodes, since)
            assert 1 <= len(tried) <= PROFILE_LIMIT, tried
            assert any(n in stop["message"] for n in tried), stop["message"]
            assert "held back" in stop["message"], stop["message"]
            until(
                operator,
                f"{a}'s change off the nodes that took it",
                lambda: every_node_on(view, a, both, (MEMORY, 2048)),
                explain,
            )
            rollout = read_rollout(kube, ns)
            assert rollout is not None
            assert rollout.halted is None
            assert rollout.held[a].plan_hash == bad

            # B's change, made while A is held, reaches every node.
            since = time.time()
            patch_spec(kube, b, {"vm": {"memoryMB": 3072}})
            new_plan(operator, kube, ns, both)
            moved = until(
                operator,
                f"{b}'s change on every node while {a} is held",
                lambda: reached(view, kube, ns, b, (MEMORY, 3072)),
                explain,
            )
            windows = apply_windows(fleet.nodes, since)
            assert sorted(w.node for w in windows) == names, windows
            assert peak_overlap(windows) <= PROFILE_LIMIT, windows
            assert every_node_on(view, a, moved, (MEMORY, 2048))  # A: its last version
            assert halted(view, a) is not None, "A's hold went with B's change"
            body = view.profile(b)
            assert body is not None
            assert compute(body)[0] == "Current", body["status"]
            rollout = read_rollout(kube, ns)
            assert rollout is not None
            assert list(rollout.held) == [a]
            assert rollout.halted is None

            # Fixing A's spec rolls A out to every node; the hold is gone.
            since = time.time()
            patch_spec(kube, a, {"containerd": {"runtimePath": None}, "vm": {"memoryMB": 4096}})
            new_plan(operator, kube, ns, moved)
            fixed = until(
                operator,
                f"{a}'s fixed spec on every node",
                lambda: reached(view, kube, ns, a, (MEMORY, 4096)),
                explain,
            )
            assert every_node_on(view, b, fixed, (MEMORY, 3072))
            rollout = read_rollout(kube, ns)
            assert rollout is not None
            assert rollout.held == {}
            windows = apply_windows(fleet.nodes, since)
            assert sorted(w.node for w in windows) == names, windows
            assert peak_overlap(windows) <= PROFILE_LIMIT, windows
            log = operator.log.read_text(encoding="utf-8", errors="replace").splitlines()
            holds = [line for line in log if f"rollout of plan {bad} halted" in line]
            assert len(holds) == 1, holds
            assert f"held back: handler {a}" in holds[0], holds[0]
