"""A failing profile holds back only itself, decided by the pure reconcile.

A small in-memory cluster: profiles, the two ConfigMaps as the operator wrote them, and nodes
that act as agents do on the plan (take it at once when their handlers would not change,
else only with permission; a handler fails on a node where it is told to). Each pass is the
operator's reconcile with its writes applied, so what a leader would read back is what the
next pass reads: the ConfigMaps alone carry a hold across passes and leaders.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.controller.builders import profile_body
from wcow_contract.wire.agent_status import GUEST_BUILD_UNSUPPORTED
from wcow_contract.wire.plan import PLAN_KEY
from wcow_contract.wire.rollout import RESUME_ANNOTATION, ROLLOUT_KEY, Rollout, parse_rollout
from wcow_operator.reconcile.drain import DrainProgress
from wcow_operator.reconcile.holds import ROLLED_OUT_KEY, read_record
from wcow_operator.reconcile.model import (
    Observed,
    ObservedNode,
    ObservedProfile,
    Outcome,
    ReconcileSettings,
)
from wcow_operator.reconcile.profiles import Memo
from wcow_operator.reconcile.reconciler import reconcile

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
SETTINGS = ReconcileSettings(namespace="wcow-system", max_unavailable=1)


@dataclass
class Node:
    name: str
    applied: str | None = None
    attempted: str | None = None
    has: dict[str, int | None] = field(default_factory=dict)  # handler -> generation on disk
    states: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    # Handlers this node cannot run by what it is (its pause image boots another guest
    # build): applied, and reported Failed / GuestBuildUnsupported, as an agent does.
    unfit: set[str] = field(default_factory=set)

    def reason(self, handler: str, state: str) -> str:
        unfit = state == "Failed" and handler in self.unfit
        return GUEST_BUILD_UNSUPPORTED if unfit else f"Canary{state}"

    def observed(self) -> ObservedNode:
        status = {
            "schemaVersion": 1,
            "hostBuild": "10.0.20348",
            "hypervAvailable": True,
            "appliedPlanHash": self.applied,
            "attemptedPlanHash": self.attempted,
            "handlers": {
                h: {"state": s, "reason": self.reason(h, s), "message": f"{s} on {self.name}"}
                | ({"profileGeneration": g} if g is not None else {})
                for h, (s, g) in self.states.items()
            },
        }
        labels = {"kubernetes.io/os": "windows"}
        ready = [h for h, (state, _) in self.states.items() if state == "Ready"]
        labels |= {f"runtime.wcow.dev/{h}": "ready" for h in ready}
        return ObservedNode(self.name, labels, json.dumps(status), "10.0.20348")


@dataclass
class Cluster:
    profiles: dict[str, dict[str, Any]]
    nodes: dict[str, Node]
    plan_cm: dict[str, Any] | None = None
    rollout_cm: dict[str, Any] | None = None
    failing: set[tuple[str, str, int]] = field(default_factory=set)  # (node, handler, gen)
    now: datetime = NOW
    outcomes: list[Outcome] = field(default_factory=list)
    settings: ReconcileSettings = SETTINGS
    memo: Memo = field(default_factory=Memo)
    # What the drainer found on each draining node (None: no drain is ever reported).
    drains: Callable[[str], DrainProgress] | None = None

    def observe(self) -> Observed:
        plan = json.loads(self.plan_cm["data"][PLAN_KEY]) if self.plan_cm else None
        return Observed(
            profiles=[ObservedProfile(copy.deepcopy(p)) for p in self.profiles.values()],
            runtime_classes={},
            plan=plan,
            plan_config_map=copy.deepcopy(self.plan_cm),
            nodes=[n.observed() for n in self.nodes.values()],
            rollout_config_map=copy.deepcopy(self.rollout_cm),
            drains=self._drains(),
        )

    def _drains(self) -> dict[str, DrainProgress] | None:
        if self.drains is None or self.rollout_cm is None:
            return None
        return {node: self.drains(node) for node in self.rollout.draining}

    def reconcile(self) -> Outcome:
        self.now += timedelta(seconds=5)
        outcome = reconcile(self.observe(), self.settings, self.now, self.memo)
        # The controller's memo is a shortcut only: holds change no outcome through it.
        assert outcome == reconcile(self.observe(), self.settings, self.now)
        for write in outcome.writes:
            if write.kind == "write-plan":
                self.plan_cm = copy.deepcopy(write.body)
            elif write.kind == "write-rollout":
                self.rollout_cm = copy.deepcopy(write.body)
            elif write.kind == "update-status":
                self.profiles[write.target]["status"] = copy.deepcopy(write.body["status"])
        self.outcomes.append(outcome)
        return outcome

    @property
    def plan(self) -> dict[str, Any]:
        assert self.plan_cm is not None
        return dict(json.loads(self.plan_cm["data"][PLAN_KEY]))

    @property
    def rollout(self) -> Rollout:
        assert self.rollout_cm is not None
        found = parse_rollout(self.rollout_cm["data"][ROLLOUT_KEY])
        assert found is not None
        return found

    def agents(self) -> None:
        """Every agent's cycle on the current plan, as the agent decides (``rollout_verdict``)."""
        plan, rollout = self.plan, self.rollout
        wanted = {h: e["generation"] for h, e in plan["handlers"].items()}
        for node in self.nodes.values():
            if node.applied == plan["hash"] and node.attempted == plan["hash"]:
                continue
            if node.has == wanted:  # config.toml would not change: taken at once
                node.attempted = node.applied = plan["hash"]
                continue
            new = not node.has  # no table of the agent's yet: takes the plan at once
            if (node.name not in rollout.permitted and not new) or node.attempted == plan["hash"]:
                continue
            node.attempted, node.has = plan["hash"], dict(wanted)
            node.states = {h: self._proven(node, h, g) for h, g in wanted.items()}
            if all(s == "Ready" or h in node.unfit for h, (s, _) in node.states.items()):
                node.applied = plan["hash"]

    def _proven(self, node: Node, handler: str, generation: int) -> tuple[str, int]:
        failed = (node.name, handler, generation) in self.failing or handler in node.unfit
        return ("Failed" if failed else "Ready"), generation

    def run(self, passes: int = 40) -> None:
        """Passes and agent cycles until nothing changes."""
        for _ in range(passes):
            before = (json.dumps(self.plan_cm), json.dumps(self.rollout_cm), self._nodes())
            self.reconcile()
            self.agents()
            if (json.dumps(self.plan_cm), json.dumps(self.rollout_cm), self._nodes()) == before:
                return
        raise AssertionError(f"no rest after {passes} passes")

    def _nodes(self) -> str:
        nodes = self.nodes.values()
        return repr(sorted((n.name, n.applied, n.attempted, n.has, n.states) for n in nodes))

    def change(self, name: str, **spec: Any) -> None:
        body = self.profiles[name]
        body["spec"].update(spec)
        body["metadata"]["generation"] += 1

    def resume(self, name: str, value: str) -> None:
        self.profiles[name]["metadata"].setdefault("annotations", {})[RESUME_ANNOTATION] = value

    def everywhere(self, handler: str) -> set[int | None]:
        return {n.has.get(handler) for n in self.nodes.values()}

    def condition(self, profile: str, type_: str) -> dict[str, Any]:
        conditions = self.profiles[profile]["status"]["conditions"]
        return dict(next(c for c in conditions if c["type"] == type_))


def two_profiles(nodes: int = 4) -> Cluster:
    """Profiles a and b rolled out on every node."""
    cluster = Cluster(
        profiles={n: profile_body(n, vm={"processorCount": 2, "memoryMB": 2048}) for n in "ab"},
        nodes={f"n{i}": Node(f"n{i}") for i in range(nodes)},
    )
    cluster.run()
    assert cluster.everywhere("a") == cluster.everywhere("b") == {1}
    return cluster


def a_fails_on_n1() -> Cluster:
    """A's generation 2 fails its canary on n1 (the second node let in)."""
    cluster = two_profiles()
    cluster.failing.add(("n1", "a", 2))
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.run()
    return cluster


def test_a_failing_change_is_held_back_and_taken_off_the_nodes_that_took_it() -> None:
    cluster = a_fails_on_n1()
    hold = cluster.rollout.held["a"]
    assert (hold.generation, hold.handler) == (2, "a")
    assert (hold.entry or {}).get("generation") == 1
    assert [f.node for f in hold.nodes] == ["n1"]
    assert cluster.plan["handlers"]["a"]["generation"] == 1  # the last rolled-out entry
    assert cluster.everywhere("a") == {1}  # n0 and n1 went back; n2, n3 never left it
    assert cluster.rollout.halted is None
    rolled = cluster.condition("a", "RolledOut")
    assert (rolled["status"], rolled["reason"]) == ("False", "RolloutHalted")
    assert "n1 (CanaryFailed)" in rolled["message"], rolled["message"]
    assert "held back" in rolled["message"]
    assert RESUME_ANNOTATION in rolled["message"]
    assert cluster.condition("a", "Stalled")["status"] == "True"
    assert cluster.condition("a", "Planned")["reason"] == "HeldBack"
    assert cluster.condition("a", "Ready")["status"] == "True"  # its last version runs
    assert cluster.condition("b", "RolledOut")["reason"] != "RolloutHalted"
    warnings = [e for o in cluster.outcomes for e in o.events if e.reason == "RolloutHalted"]
    assert [e.profile for e in warnings] == ["a"]  # once, and only the failing profile


def test_another_profiles_change_reaches_every_node_while_one_is_held() -> None:
    cluster = a_fails_on_n1()
    cluster.change("b", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.run()
    assert cluster.everywhere("b") == {2}
    assert cluster.everywhere("a") == {1}
    assert "a" in cluster.rollout.held
    assert cluster.condition("b", "RolledOut")["reason"] == "RolloutComplete"
    assert cluster.condition("a", "RolledOut")["reason"] == "RolloutHalted"
    assert all(n.applied == cluster.plan["hash"] for n in cluster.nodes.values())


def test_a_new_generation_releases_the_hold_and_rolls_out_everywhere() -> None:
    cluster = a_fails_on_n1()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 3072})  # generation 3: fixed
    cluster.run()
    assert cluster.rollout.held == {}
    assert cluster.everywhere("a") == {3}
    assert cluster.condition("a", "RolledOut")["reason"] == "RolloutComplete"
    assert cluster.condition("a", "Planned")["reason"] == "InPlan"


def test_the_resume_annotation_sends_the_held_change_out_again() -> None:
    cluster = a_fails_on_n1()
    cluster.failing.clear()  # the node was repaired
    cluster.resume("a", "1")
    cluster.run()
    assert cluster.rollout.held == {}
    assert cluster.everywhere("a") == {2}  # n1 tried again in its turn
    assert cluster.condition("a", "RolledOut")["reason"] == "RolloutComplete"


def test_resumed_and_failing_again_it_is_held_again_with_the_same_last_entry() -> None:
    cluster = a_fails_on_n1()
    cluster.resume("a", "1")
    cluster.run()
    hold = cluster.rollout.held["a"]
    assert hold.resumed_by == "1"
    assert (hold.entry or {}).get("generation") == 1
    assert cluster.everywhere("a") == {1}


def test_deleting_a_held_profile_drops_its_hold_and_its_handler() -> None:
    cluster = a_fails_on_n1()
    del cluster.profiles["a"]
    cluster.run()
    assert cluster.rollout.held == {}
    assert "a" not in cluster.plan["handlers"]
    assert cluster.everywhere("a") == {None}


def test_a_change_that_never_rolled_out_leaves_the_plan() -> None:
    cluster = two_profiles()
    cluster.failing.add(("n0", "c", 1))
    cluster.profiles["c"] = profile_body("c")
    cluster.run()
    hold = cluster.rollout.held["c"]
    assert hold.entry is None
    assert "c" not in cluster.plan["handlers"]
    assert cluster.everywhere("c") == {None}
    planned = cluster.condition("c", "Planned")
    assert (planned["status"], planned["reason"]) == ("False", "HeldBack")


def test_a_node_silent_past_the_timeout_still_halts_the_whole_rollout() -> None:
    cluster = two_profiles()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.reconcile()  # n0 let in; it never answers
    cluster.now += SETTINGS.rollout_timeout
    cluster.reconcile()
    assert cluster.rollout.halted is not None
    assert cluster.rollout.halted.nodes[0].reason == "RolloutTimeout"
    assert cluster.rollout.held == {}
    assert cluster.plan["handlers"]["a"]["generation"] == 2


def test_without_a_record_of_the_last_entry_a_failure_halts_the_whole_rollout() -> None:
    """A plan written by an operator before holds (no record beside it): nothing to go
    back to, so the rollout halts as it did."""
    cluster = two_profiles()
    cluster.failing.add(("n0", "a", 2))
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.reconcile()
    assert cluster.plan_cm is not None
    assert read_record(cluster.plan_cm)["a"] is not None
    del cluster.plan_cm["data"][ROLLED_OUT_KEY]
    cluster.run()
    assert cluster.rollout.halted is not None
    assert cluster.rollout.held == {}


def test_a_new_leader_keeps_the_hold_from_the_configmaps_alone() -> None:
    cluster = a_fails_on_n1()
    state = cluster.observe()
    # Another process: nothing but what it reads.
    again = reconcile(state, SETTINGS, cluster.now + timedelta(minutes=1))
    assert [w.kind for w in again.writes if w.kind in ("write-plan", "write-rollout")] == []
    assert again.plan["hash"] == cluster.plan["hash"]


def test_a_rollout_without_holds_keeps_its_released_shape() -> None:
    cluster = two_profiles()
    assert "held" not in json.loads(cluster.rollout_cm["data"][ROLLOUT_KEY])  # type: ignore[index]


def test_a_change_over_an_unfinished_one_goes_back_to_what_every_node_had() -> None:
    """A's generation 2 is on some nodes only when generation 3 arrives and fails: the
    last entry every node had is generation 1's, and that is what the plan goes back to."""
    cluster = two_profiles()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 3072})
    for _ in range(2):  # n0 let in and done, n1 let in
        cluster.reconcile()
        cluster.agents()
    assert cluster.everywhere("a") == {1, 2}
    cluster.failing.add(("n0", "a", 3))
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.run()
    hold = cluster.rollout.held["a"]
    assert (hold.entry or {}).get("generation") == 1
    assert cluster.everywhere("a") == {1}


def test_when_the_last_entry_fails_too_the_whole_rollout_halts() -> None:
    cluster = two_profiles()
    cluster.failing |= {("n0", "a", 2), ("n0", "a", 1)}  # the node broke meanwhile
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.change("b", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.run()
    assert "a" in cluster.rollout.held
    assert cluster.rollout.halted is not None  # going back failed on n0: nothing else to do
    assert cluster.rollout.halted.nodes[0].node == "n0"


def test_a_forged_held_entry_is_not_written_into_the_plan() -> None:
    """Whoever can write the rollout ConfigMap cannot plant an entry through a hold: the
    entry must be what the renderer makes of its spec, for this profile's uid."""
    cluster = a_fails_on_n1()
    assert cluster.rollout_cm is not None
    document = json.loads(cluster.rollout_cm["data"][ROLLOUT_KEY])
    document["held"]["a"]["entry"]["runtime"]["options"]["VmMemorySizeInMb"] = 65536
    cluster.rollout_cm["data"][ROLLOUT_KEY] = json.dumps(document)
    outcome = cluster.reconcile()
    assert outcome.plan["handlers"]["a"]["generation"] == 2  # the hold is gone, not obeyed
    assert all(
        e["runtime"]["options"]["VmMemorySizeInMb"] != 65536
        for e in outcome.plan["handlers"].values()
    )


def test_a_failing_rename_keeps_the_old_handler_in_the_plan() -> None:
    """A change that renames the handler and fails: the profile's last rolled-out entry is
    under its old handler, and that is what stays (not an empty place)."""
    cluster = two_profiles()
    cluster.failing.add(("n0", "a2", 2))
    cluster.change("a", handler="a2")
    cluster.run()
    hold = cluster.rollout.held["a"]
    assert (hold.handler, hold.entry_handler) == ("a2", "a")
    assert sorted(cluster.plan["handlers"]) == ["a", "b"]
    assert cluster.everywhere("a") == {1}
    assert cluster.everywhere("a2") == {None}


def test_nodes_still_changing_keep_their_place_in_the_rollout_that_goes_back() -> None:
    """Two nodes let in together; one fails while the other is still changing. The plan
    that holds the change back lets in no more than maxUnavailable beside that one."""
    cluster = two_profiles()
    cluster.settings = ReconcileSettings(namespace="wcow-system", max_unavailable=2)
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.reconcile()
    cluster.agents()  # n0 and n1 take it
    cluster.reconcile()
    assert sorted(cluster.rollout.permitted) == ["n0", "n1", "n2", "n3"]
    bad = cluster.plan["hash"]
    n2, n3 = cluster.nodes["n2"], cluster.nodes["n3"]
    n2.attempted, n2.has, n2.states["a"] = bad, {"a": 2, "b": 1}, ("Failed", 2)
    n3.attempted, n3.states["a"] = bad, ("Pending", 2)  # still at it
    cluster.reconcile()
    rollout = cluster.rollout
    assert "a" in rollout.held
    assert rollout.plan_hash != bad
    # n3 kept its place; of the nodes that go back, only one beside it (n1 waits).
    assert sorted(rollout.permitted) == ["n0", "n3"]


def two_pools() -> Cluster:
    """Profiles a and b, each of its own node pool: n0 and n1 cannot run b by what they
    are, n2 and n3 cannot run a (each reports the other pool's class GuestBuildUnsupported)."""
    vm = {"processorCount": 2, "memoryMB": 2048}
    cluster = Cluster(
        profiles={n: profile_body(n, vm=vm) for n in "ab"},
        nodes={f"n{i}": Node(f"n{i}", unfit={"b" if i < 2 else "a"}) for i in range(4)},
    )
    cluster.run()
    return cluster


def test_a_pool_that_cannot_run_a_class_counts_as_done_for_its_changes() -> None:
    """A node that cannot run a class by design has not failed its change: the change
    reaches every node, one at a time, and nothing is held back or halted."""
    cluster = two_pools()
    assert cluster.everywhere("a") == cluster.everywhere("b") == {1}
    for name in "ab":
        cluster.change(name, vm={"processorCount": 2, "memoryMB": 3072})
        cluster.run()
        assert cluster.everywhere(name) == {2}, name
        assert cluster.rollout.held == {}, cluster.rollout
        assert cluster.rollout.halted is None, cluster.rollout
        assert all(n.applied == cluster.plan["hash"] for n in cluster.nodes.values())
        for profile in "ab":
            rolled = cluster.condition(profile, "RolledOut")
            assert rolled["reason"] != "RolloutHalted", (profile, rolled)
            assert cluster.condition(profile, "Stalled")["status"] == "False", profile
    rolled = cluster.condition("b", "RolledOut")
    assert (rolled["status"], rolled["reason"]) == ("True", "RolloutComplete")
    assert "4/4" in rolled["message"]
    # Each profile counts its own pool, and lists the other as unable to run it.
    nodes = cluster.profiles["a"]["status"]["nodes"]
    assert (nodes["eligible"], nodes["ready"], nodes["failed"]) == (2, 2, 0)
    reasons = {f["reason"] for f in cluster.profiles["a"]["status"]["failures"]}
    assert reasons == {GUEST_BUILD_UNSUPPORTED}


def test_a_bad_change_in_one_pool_holds_back_only_its_profile() -> None:
    """A change that fails where its class belongs is still a failure: held back, charged
    to that handler alone; the other pool's verdicts hold nobody back."""
    cluster = two_pools()
    cluster.failing.add(("n0", "a", 2))
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.run()
    assert set(cluster.rollout.held) == {"a"}
    assert [f.node for f in cluster.rollout.held["a"].nodes] == ["n0"]
    cluster.change("b", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.run()
    assert cluster.everywhere("b") == {2}
    assert cluster.condition("b", "RolledOut")["reason"] == "RolloutComplete"
    cluster.failing.clear()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 3072})  # the fix
    cluster.run()
    assert cluster.rollout.held == {}
    assert cluster.everywhere("a") == {3}
    assert cluster.condition("a", "RolledOut")["reason"] == "RolloutComplete"


def test_a_class_no_node_can_run_is_stalled_and_holds_back_nobody() -> None:
    cluster = two_pools()
    for node in cluster.nodes.values():
        node.unfit.add("c")
    cluster.profiles["c"] = profile_body("c", vm={"processorCount": 2, "memoryMB": 2048})
    cluster.run()
    assert cluster.rollout.held == {}
    assert cluster.everywhere("c") == {1}
    stalled = cluster.condition("c", "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "NoEligibleNodes")
    assert GUEST_BUILD_UNSUPPORTED in stalled["message"]
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.run()
    assert cluster.everywhere("a") == {2}
    assert cluster.condition("a", "Stalled")["status"] == "False"


def test_a_failure_is_charged_to_the_handler_that_failed_not_to_the_other_pools() -> None:
    """Both profiles change at once and b really fails on n2, a node of its pool, which
    also reports a GuestBuildUnsupported (not its pool's class): only b is held back."""
    cluster = two_pools()
    cluster.failing.add(("n2", "b", 2))
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.change("b", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.run()
    assert set(cluster.rollout.held) == {"b"}, cluster.rollout
    assert cluster.everywhere("a") == {2}
    assert cluster.everywhere("b") == {1}
    assert cluster.condition("a", "RolledOut")["reason"] == "RolloutComplete"
    rolled = cluster.condition("b", "RolledOut")["message"]
    assert "n2 (CanaryFailed)" in rolled, rolled


def test_a_pod_that_blocks_a_drain_holds_back_only_its_own_class() -> None:
    """A tenant's pod protected by a PodDisruptionBudget that allows no disruption keeps
    n0 from draining for a's change: the DrainTimeout is charged to a, whose change is held
    back (the pod and the budget named in a's status); b's change goes on to every node."""
    evict = {"drain": "Evict", "drainTimeoutSeconds": 60}
    vm = {"processorCount": 2, "memoryMB": 2048}
    cluster = Cluster(
        profiles={n: profile_body(n, vm=vm, rollout=evict) for n in "ab"},
        nodes={f"n{i}": Node(f"n{i}") for i in range(3)},
    )
    refused = (
        "1 pod(s) still on the node: team/web-0; eviction refused: team/web-0: Cannot evict "
        "pod as it would violate the pod's disruption budget. The disruption budget web needs "
        "1 healthy pods and has 1 currently"
    )

    def drains(node: str) -> DrainProgress:
        """As the drainer finds n0: its pod of class a stays while a's pods are evicted."""
        order = cluster.outcomes[-1].drain.order if cluster.outcomes else None
        if node == "n0" and order is not None and "a" in order.evict:
            return DrainProgress(False, refused, blocking=("a",))
        return DrainProgress(True)

    cluster.drains = drains
    cluster.run()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.change("b", vm={"processorCount": 2, "memoryMB": 3072})
    cluster.reconcile()  # n0 let in to drain first (by name); its drain never ends
    cluster.now += timedelta(seconds=61)
    cluster.run()
    assert set(cluster.rollout.held) == {"a"}, cluster.rollout
    assert cluster.rollout.halted is None
    assert cluster.everywhere("b") == {2}
    assert cluster.everywhere("a") == {1}
    rolled = cluster.condition("a", "RolledOut")
    assert rolled["reason"] == "RolloutHalted"
    assert "n0 (DrainTimeout)" in rolled["message"]
    assert "team/web-0" in rolled["message"]
    assert "disruption budget web" in rolled["message"]
    assert cluster.condition("b", "RolledOut")["reason"] == "RolloutComplete"


def test_a_drain_that_cannot_be_charged_still_halts_the_whole_rollout() -> None:
    """No pod of a changed class to blame (the drain never started, the API refused it):
    nothing can be held back, so the rollout halts as before."""
    evict = {"drain": "Evict", "drainTimeoutSeconds": 60}
    cluster = Cluster(
        profiles={"a": profile_body("a", rollout=evict)},
        nodes={f"n{i}": Node(f"n{i}") for i in range(2)},
    )
    cluster.drains = lambda node: DrainProgress(False, "the API refused: 403")
    cluster.run()
    cluster.change("a", vm={"processorCount": 2, "memoryMB": 4096})
    cluster.reconcile()
    cluster.now += timedelta(seconds=61)
    cluster.reconcile()
    assert cluster.rollout.halted is not None
    assert cluster.rollout.held == {}
