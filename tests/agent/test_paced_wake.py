"""A paced plan change wakes at once only the nodes the rollout lets in for it: the others
(which can only record that they wait) wake at their place in a spread window, so a plan
write does not send the whole fleet to the API server at once, and the nodes let in are not
queued behind the rest."""

from __future__ import annotations

import threading

from tests.agent.fakes import FakeCluster
from tests.agent.test_pacing import rollout_text
from wcow_agent.loop.cluster import PlanObject, RolloutObject
from wcow_agent.loop.cluster_view import (
    PACED_WAKE_SPREAD_SECONDS,
    ClusterView,
    RunOptions,
    paced_wake_delay,
)
from wcow_agent.loop.metrics import Metrics

NODE = "win-1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def view_of(clock: Clock) -> tuple[ClusterView, threading.Event]:
    wake = threading.Event()
    view = ClusterView(
        FakeCluster(), RunOptions(node_name=NODE), Metrics(), threading.Event(), wake, clock=clock
    )
    return view, wake


def plan(text: str, announced: str | None = "sha256:h2", *, paced: bool = True) -> PlanObject:
    return PlanObject(True, text, "7", paced=paced, announced_hash=announced)


def rollout(text: str) -> RolloutObject:
    return RolloutObject(True, text, "8")


def test_a_paced_plan_this_node_is_not_let_in_for_wakes_it_later_not_now() -> None:
    clock = Clock()
    view, wake = view_of(clock)
    view.on_rollout(rollout(rollout_text("sha256:h1", NODE)))  # let in for the old plan
    wake.clear()
    view.on_plan(plan('{"v": 2}'))
    assert not wake.is_set()
    assert view.deferred_wake() == 100.0 + paced_wake_delay(NODE)
    # The rollout for the new plan names another node: still later, not now.
    view.on_rollout(rollout(rollout_text("sha256:h2", "win-2")))
    assert not wake.is_set()
    # The rollout that lets this node in wakes it at once.
    view.on_rollout(rollout(rollout_text("sha256:h2", "win-2", NODE)))
    assert wake.is_set()
    view.cycle_starts()
    assert view.deferred_wake() is None


def test_let_in_already_or_not_paced_or_uninstalling_wakes_at_once() -> None:
    for first, change in (
        (rollout_text("sha256:h2", NODE), plan('{"v": 2}')),  # let in for this plan
        (rollout_text("sha256:h1"), plan('{"v": 2}', paced=False)),
        (rollout_text("sha256:h1"), plan('{"v": 2}', announced=None)),  # no hint: at once
        (rollout_text("sha256:h1"), PlanObject(False, None, "9", paced=True)),  # deleted
    ):
        view, wake = view_of(Clock())
        view.on_rollout(rollout(first))
        wake.clear()
        view.on_plan(change)
        assert wake.is_set(), change
        assert view.deferred_wake() is None


def test_a_rollout_the_agent_cannot_read_wakes_at_once() -> None:
    view, wake = view_of(Clock())
    view.on_rollout(rollout("not json"))
    wake.clear()
    view.on_plan(plan('{"v": 2}'))
    assert wake.is_set()


def test_the_spread_is_stable_per_node_and_covers_the_window() -> None:
    delays = [paced_wake_delay(f"node-{i:04d}") for i in range(1000)]
    assert delays == [paced_wake_delay(f"node-{i:04d}") for i in range(1000)]
    assert all(0 <= d < PACED_WAKE_SPREAD_SECONDS for d in delays)
    # uniform enough: every tenth of the window holds some of a thousand nodes
    tenths = {int(10 * d / PACED_WAKE_SPREAD_SECONDS) for d in delays}
    assert tenths == set(range(10))
