"""When the runner starts passes: the debounce counts from the first change a pass has not
seen, so a burst longer than a pass is not held up a whole debounce after each pass.

The runner runs on a ``VirtualClock``: each pass takes ``PASS_SECONDS`` of its time, and
what happens meanwhile is scheduled on it."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import cast

from tests.controller.virtual_clock import VirtualClock
from wcow_operator.controller.controller import Controller, PassReport
from wcow_operator.controller.runner import Runner

DEBOUNCE = 0.8
PASS_SECONDS = 1.5


class SlowController:
    """Each pass takes ``PASS_SECONDS`` (as 500 profiles' writes do); records when passes
    start and lets a test act at a moment after a pass starts. Stops the runner once
    ``passes`` passes have started (the last one runs to its end)."""

    def __init__(self, clock: VirtualClock, passes: int) -> None:
        self.clock = clock
        self.passes = passes
        self.stop = threading.Event()
        self.starts: list[float] = []
        # (seconds into the next pass, action); an action may come after that pass ends
        self.during_pass: list[tuple[float, Callable[[], object]]] = []
        self.cache = self

    def synced(self) -> bool:
        return True

    def hand_over(self) -> None:
        pass

    def started(self) -> float:
        started = self.clock.monotonic()
        self.starts.append(started)
        if len(self.starts) >= self.passes:
            self.stop.set()
        actions, self.during_pass = self.during_pass, []
        for offset, action in actions:
            self.clock.at(started + offset, action)
        return started

    def run_pass(self) -> PassReport:
        self.started()
        self.clock.sleep(PASS_SECONDS)
        return PassReport()


def run(controller: SlowController) -> Runner:
    """The runner on the controller's clock, until the controller stops it."""
    return Runner(
        cast(Controller, controller),
        resync_seconds=3600,
        debounce_seconds=DEBOUNCE,
        clock=controller.clock,
    )


def test_changes_made_during_a_long_pass_are_handled_when_it_ends() -> None:
    controller = SlowController(VirtualClock(), passes=3)
    runner = run(controller)
    changed: list[float] = []

    def burst() -> None:
        changed.append(controller.clock.monotonic())
        controller.during_pass.append((0.1, runner.trigger))
        runner.trigger()  # a burst: one change now, one early in the pass it starts

    controller.during_pass.append((PASS_SECONDS + 0.1, burst))  # after the first pass
    runner.run(controller.stop)
    second, third = controller.starts[1], controller.starts[2]
    assert second - changed[0] >= DEBOUNCE - 0.05  # a change still waits the debounce
    # The change made 0.1 s into the second pass had waited the debounce when that pass
    # ended: the third pass follows at once, not DEBOUNCE after the second one's end.
    assert third - second < PASS_SECONDS + DEBOUNCE / 2


def test_a_change_late_in_a_pass_still_waits_the_debounce() -> None:
    controller = SlowController(VirtualClock(), passes=3)
    runner = run(controller)
    changed: list[float] = []

    def change() -> None:
        changed.append(controller.clock.monotonic())
        runner.trigger()

    controller.during_pass += [
        # right after the first pass starts: a change late in the second one
        (0.0, lambda: controller.during_pass.append((PASS_SECONDS - 0.1, change))),
        (PASS_SECONDS + 0.1, runner.trigger),
    ]
    runner.run(controller.stop)
    assert controller.starts[2] - changed[0] >= DEBOUNCE - 0.05


class SupersededController(SlowController):
    """Every pass has a status write refused with 409 (a watch that lags behind)."""

    def run_pass(self) -> PassReport:
        self.started()
        return PassReport(superseded=1)


def test_refused_status_writes_back_off_until_the_watch_brings_the_change() -> None:
    clock = VirtualClock()
    controller = SupersededController(clock, passes=99)
    runner = run(controller)
    backed_off: list[float] = []
    triggered: list[float] = []

    def newer_profile() -> None:
        backed_off.extend(controller.starts)
        controller.passes = len(backed_off) + 1  # stop after the pass the trigger starts
        triggered.append(clock.monotonic())
        runner.trigger()  # the newer profile arrives: a pass after the debounce

    clock.at(4.5, newer_profile)  # no change arrives until then: passes back off (1 s, 2 s)
    runner.run(controller.stop)
    gaps = [later - earlier for earlier, later in itertools.pairwise(backed_off)]
    assert len(backed_off) <= 3  # a debounce-paced loop would have made about six
    assert all(gap >= 1.0 for gap in gaps)
    # The trigger is not held to the backoff (4 s by then): one debounce.
    assert controller.starts[len(backed_off)] - triggered[0] < DEBOUNCE + 0.5
