"""Node pools that cannot run a class by design, on the real control plane (``make e2e``).

A node that cannot run a class by what it is (its pause image boots another guest build, or
is of a build process isolation cannot run on its host) has not failed a change of that
class: the paced rollout counts it as done, no profile is held back or halted by another
pool's verdicts, and a class its profile's own nodeSelector keeps off a pool is never
applied there (no table, no containerd restart, no report). Judged from outside: the
profiles' status as kstatus reads it, the nodes' reports, and each simulated host's disk and
journal.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.conftest import ROOT
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
)
from tests.fleet.harness import View, handler_states, running_fleet, running_operator
from tests.fleet.paced import (
    BAD_CHANGE,
    MEMORY,
    apply_windows,
    halted,
    new_plan,
    patch_spec,
    peak_overlap,
    plan_hash,
    read_rollout,
    settle,
    until,
)
from tests.kstatus import compute
from wcow_contract.labels import READY_VALUE, ready_label

pytestmark = pytest.mark.e2e

POOL_LIMIT = 2
GUEST_2019 = "node.runtime.wcow.dev/guest-build-17763"


def samples(prefix: str) -> dict[str, dict[str, Any]]:
    """deploy/samples, each renamed ``<prefix>-<name>`` (its handler with it)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "deploy" / "samples").glob("*.yaml")):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        name = f"{prefix}-{body['metadata']['name']}"[:63]
        body["metadata"] = {"name": name}
        found[body["metadata"]["name"]] = body
    return found


def state_of(view: View, name: str) -> tuple[str, str]:
    """kstatus's word on the live profile, and the reason of its RolledOut condition."""
    body = view.profile(name)
    assert body is not None, name
    return compute(body)[0], (condition(body, "RolledOut") or {}).get("reason", "")


def rolled_out_everywhere(view: View, name: str, hash_: str, total: int) -> bool:
    body = view.profile(name)
    if body is None:
        return False
    status = body.get("status") or {}
    rollout = status.get("rollout") or {}
    return (
        status.get("observedGeneration") == body["metadata"]["generation"]
        and rollout.get("planHash") == hash_
        and rollout.get("progress") == f"{total}/{total}"
        and (condition(body, "RolledOut") or {}).get("status") == "True"
    )


def applied_everywhere(view: View, hash_: str) -> bool:
    return all((view.agent_status(n) or {}).get("appliedPlanHash") == hash_ for n in view.names)


def memory_everywhere(view: View, handler: str, hash_: str, memory: int) -> bool:
    """Every node applied the plan with the handler's VM memory on disk, and its profile
    says the change rolled out to all of them."""
    return (
        applied_everywhere(view, hash_)
        and rolled_out_everywhere(view, handler, hash_, len(view.names))
        and all(
            (view.disk_runtimes(n)[handler].get("options") or {}).get(MEMORY) == memory
            for n in view.names
        )
    )


def summary(view: View, names: list[str]) -> str:
    lines = []
    for name in names:
        body = view.profile(name) or {}
        status = body.get("status") or {}
        lines.append(
            f"{name}: {status.get('rollout')} RolledOut={condition(body, 'RolledOut')} "
            f"Stalled={condition(body, 'Stalled')}"
        )
    for node in view.names:
        status = view.agent_status(node) or {}
        states = {h: f"{e['state']}/{e['reason']}" for h, e in status.get("handlers", {}).items()}
        lines.append(
            f"{node}: applied={status.get('appliedPlanHash')} "
            f"attempted={status.get('attemptedPlanHash')} {states}"
        )
    return "\n".join(lines)


def test_the_readme_recipe_rolls_a_change_out_to_every_node(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """The README's recipe: the operator at its defaults, six simulated nodes (WS2022 hosts
    whose pause image is of their own build), every sample applied, then one sample's VM
    memory changed. The change reaches all six nodes one at a time (10% of 6), although
    every node reports the ltsc2019 class GuestBuildUnsupported; no profile is halted, and
    only the classes no node can run are Stalled (NoEligibleNodes)."""
    bodies = samples(prefix)
    names = sorted(bodies)
    hv22 = f"{prefix}-hyperv-ltsc2022"
    unrunnable = {f"{prefix}-hyperv-ltsc2019", f"{prefix}-hyperv-ltsc2025"}
    custom = client.CustomObjectsApi(kube)
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(kubeconfig, ns, tmp_path / "operator.log") as operator,
        running_fleet(kubeconfig, tmp_path / "fleet", ns, f"{prefix}w", 6) as fleet,
        profiles_cleaned_up(kube, names),
    ):
        view = View(kube, [fleet])
        operator.until(
            "every simulated node's first report",
            lambda: all(view.agent_status(n) is not None for n in view.names),
        )
        for body in bodies.values():
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        first = until(
            operator,
            "every sample on its first plan on every node",
            lambda: (
                (h := plan_hash(kube, ns))
                and len((view.agent_status(view.names[0]) or {}).get("handlers", {})) == len(names)
                and applied_everywhere(view, h)
                and all(rolled_out_everywhere(view, n, h, 6) for n in names)
                and h
            ),
            lambda: summary(view, names),
        )

        since = time.time()
        patch_spec(kube, hv22, {"vm": {"memoryMB": 3072}})
        changed = new_plan(operator, kube, ns, first)
        until(
            operator,
            f"{hv22}'s change on every node",
            lambda: memory_everywhere(view, hv22, changed, 3072),
            lambda: summary(view, names),
        )
        windows = apply_windows(fleet.nodes, since)
        assert sorted(w.node for w in windows) == sorted(fleet.nodes), windows
        assert peak_overlap(windows) == 1, windows  # 10% of 6 nodes, rounded up
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert (rollout.halted, rollout.held) == (None, {}), rollout
        for node in view.names:
            assert handler_states(view, node)[f"{prefix}-hyperv-ltsc2019"] == (
                "Failed",
                "GuestBuildUnsupported",
            )
        operator.until(
            "every runnable sample Current",
            lambda: all(state_of(view, n)[0] == "Current" for n in set(names) - unrunnable),
        )
        for name in names:
            assert state_of(view, name)[1] != "RolloutHalted", summary(view, names)
        for name in unrunnable:
            body = view.profile(name)
            assert body is not None
            assert compute(body)[0] == "Failed", body["status"]
            stalled = condition(body, "Stalled") or {}
            assert stalled.get("reason") == "NoEligibleNodes", body["status"]


def test_two_pools_each_take_their_classes_changes_and_a_bad_one_holds_back_only_itself(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """Pools per guest build, as docs/agent.md advises: a class of each guest build, a
    process class (which runs only where the pause image is of the host's build), and an
    ltsc2019 class kept on its pool by its own nodeSelector. A change to each reaches every
    node it concerns with at most POOL_LIMIT applying at once and leaves every other profile
    Current; the selected class never touches the other pool; a bad change to it is held back
    on its own pool alone while another profile's change goes on, and its fix rolls out."""
    hv22, hv19, proc, sel19 = (f"{prefix}-{s}" for s in ("hv22", "hv19", "proc", "sel19"))
    names = [hv22, hv19, proc, sel19]
    custom = client.CustomObjectsApi(kube)
    vm = {"processorCount": 2, "memoryMB": 2048}
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig, ns, tmp_path / "operator.log", "--max-unavailable", str(POOL_LIMIT)
        ) as operator,
        running_fleet(kubeconfig, tmp_path / "a", ns, f"{prefix}a", 3) as pool22,
        running_fleet(
            kubeconfig, tmp_path / "b", ns, f"{prefix}b", 3, pause_build="10.0.17763"
        ) as pool19,
        profiles_cleaned_up(kube, names),
    ):
        view = View(kube, [pool22, pool19])
        nodes = {**pool22.nodes, **pool19.nodes}
        operator.until(
            "every simulated node's first report",
            lambda: all(view.agent_status(n) is not None for n in view.names),
        )
        for body in (
            profile(hv22, isolation="HyperV", windowsBuild="ltsc2022", vm=vm),
            profile(hv19, isolation="HyperV", windowsBuild="ltsc2019", vm=vm),
            profile(proc, isolation="Process"),
            profile(
                sel19,
                isolation="HyperV",
                windowsBuild="ltsc2019",
                vm=vm,
                scheduling={"nodeSelector": {GUEST_2019: "true"}},
            ),
        ):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

        def explain() -> str:
            return summary(view, names)

        def everywhere(hash_: str, *changed: str) -> bool:
            """Every node applied the plan, and the changed profiles say it rolled out (an
            untouched profile keeps what the last change of it said)."""
            return applied_everywhere(view, hash_) and all(
                rolled_out_everywhere(view, n, hash_, 6) for n in changed or names
            )

        current = until(
            operator,
            "the four classes on their first plan",
            lambda: (
                (h := plan_hash(kube, ns))
                and len((view.agent_status(view.names[-1]) or {}).get("handlers", {})) == 4
                and everywhere(h)
                and h
            ),
            explain,
        )
        # Each pool runs its own classes; the selected class is not on pool22 at all.
        for node in pool22.nodes:
            states = handler_states(view, node)
            assert states[hv22] == ("Ready", "CanaryPassed"), (node, states)
            assert states[proc] == ("Ready", "CanaryPassed"), (node, states)
            assert states[hv19] == ("Failed", "GuestBuildUnsupported"), (node, states)
            assert sel19 not in states, (node, states)
            assert sel19 not in view.disk_runtimes(node), node
            assert ready_label(sel19) not in view.labels(node), node
        for node in pool19.nodes:
            states = handler_states(view, node)
            assert states[hv19] == ("Ready", "CanaryPassed"), (node, states)
            assert states[sel19] == ("Ready", "CanaryPassed"), (node, states)
            assert states[hv22] == ("Failed", "GuestBuildUnsupported"), (node, states)
            assert states[proc] == ("Failed", "GuestBuildUnsupported"), (node, states)
            assert view.labels(node)[ready_label(sel19)] == READY_VALUE, node

        # A change to each profile, one after the other, each through its pools.
        changes: list[tuple[str, dict[str, Any]]] = [
            (hv22, {"vm": {"memoryMB": 3072}}),
            (hv19, {"vm": {"memoryMB": 3072}}),
            (proc, {"annotations": {"pod": ["io.microsoft.container.*"]}}),
            (sel19, {"vm": {"memoryMB": 3072}}),
        ]
        for name, spec in changes:
            since = time.time()
            restarts22 = {n: s.restarts for n, s in pool22.nodes.items()}
            patch_spec(kube, name, spec)
            current = new_plan(operator, kube, ns, current)
            until(
                operator,
                f"{name}'s change on every node",
                lambda hash_=current, name=name: everywhere(hash_, name),
                explain,
            )
            windows = apply_windows(nodes, since)
            assert peak_overlap(windows) <= POOL_LIMIT, (name, windows)
            if name == sel19:  # its pool alone applied it; the other restarted nothing
                assert {w.node for w in windows} == set(pool19.nodes), windows
                assert {n: s.restarts for n, s in pool22.nodes.items()} == restarts22
            else:
                assert {w.node for w in windows} == set(nodes), (name, windows)
            rollout = read_rollout(kube, ns)
            assert rollout is not None
            assert (rollout.halted, rollout.held) == (None, {}), (name, rollout)
            operator.until(
                f"every profile Current after {name}'s change",
                lambda: all(state_of(view, n)[0] == "Current" for n in names),
            )

        # A bad change to the selected class: its own pool fails it, it is held back there;
        # pool22 never applies it.
        since = time.time()
        restarts22 = {n: s.restarts for n, s in pool22.nodes.items()}
        patch_spec(kube, sel19, BAD_CHANGE)
        bad = new_plan(operator, kube, ns, current)
        stop = until(operator, f"{sel19} held back", lambda: halted(view, sel19), explain)
        assert any(n in stop["message"] for n in pool19.nodes), stop["message"]
        assert not any(n in stop["message"] for n in pool22.nodes), stop["message"]
        assert "held back" in stop["message"], stop["message"]
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert set(rollout.held) == {sel19}, rollout
        assert rollout.held[sel19].plan_hash == bad
        assert rollout.halted is None, rollout
        settle(1.0)
        assert {n: s.restarts for n, s in pool22.nodes.items()} == restarts22
        # Meanwhile another profile's change reaches every node, paced.
        since_other = time.time()
        patch_spec(kube, hv22, {"vm": {"memoryMB": 4096}})
        other = new_plan(operator, kube, ns, plan_hash(kube, ns))
        until(
            operator,
            f"{hv22}'s change on every node while {sel19} is held",
            lambda: memory_everywhere(view, hv22, other, 4096),
            explain,
        )
        assert peak_overlap(apply_windows(nodes, since_other)) <= POOL_LIMIT
        for name in (hv22, hv19, proc):
            assert state_of(view, name)[1] != "RolloutHalted", explain()
        assert halted(view, sel19) is not None
        for node in pool22.nodes:
            assert sel19 not in view.disk_runtimes(node), node
        restarts22 = {n: s.restarts for n, s in pool22.nodes.items()}

        # The fix: the shim where it is; the class rolls out on its pool again.
        patch_spec(kube, sel19, {"containerd": {"runtimePath": None}})
        fixed = new_plan(operator, kube, ns, plan_hash(kube, ns))
        until(operator, "the fix on every node", lambda: everywhere(fixed, sel19), explain)
        settle(1.0)
        operator.until(
            "every profile Current after the fix",
            lambda: all(state_of(view, n)[0] == "Current" for n in names),
        )
        assert peak_overlap(apply_windows(nodes, since)) <= POOL_LIMIT
        assert {n: s.restarts for n, s in pool22.nodes.items()} == restarts22
        for node in pool19.nodes:
            assert view.labels(node)[ready_label(sel19)] == READY_VALUE, node
            options = view.disk_runtimes(node)[sel19].get("options") or {}
            assert options.get(MEMORY) == 3072, node
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert (rollout.halted, rollout.held) == (None, {}), rollout
