"""When the runner starts passes: the debounce counts from the first change a pass has not
seen, so a burst longer than a pass is not held up a whole debounce after each pass."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from wcow_operator.controller.controller import Controller, PassReport, Runner

DEBOUNCE = 0.8
PASS_SECONDS = 1.5


class SlowController:
    """Each pass takes ``PASS_SECONDS`` (as 500 profiles' writes do); records when passes
    start and lets a test act at a moment inside a pass."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.during_pass: list[tuple[float, Any]] = []  # (seconds into the pass, action)
        self.cache = self

    def synced(self) -> bool:
        return True

    def hand_over(self) -> None:
        pass

    def run_pass(self) -> PassReport:
        started = time.monotonic()
        self.starts.append(started)
        actions, self.during_pass = self.during_pass, []
        for offset, action in actions:
            time.sleep(max(0.0, started + offset - time.monotonic()))
            action()
        time.sleep(max(0.0, started + PASS_SECONDS - time.monotonic()))
        return PassReport()


@contextmanager
def running(controller: SlowController) -> Iterator[Runner]:
    runner = Runner(cast(Controller, controller), resync_seconds=3600, debounce_seconds=DEBOUNCE)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        runner.trigger()
        thread.join(timeout=10)


def wait_for_passes(controller: SlowController, count: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while len(controller.starts) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(controller.starts) >= count


def test_changes_made_during_a_long_pass_are_handled_when_it_ends() -> None:
    controller = SlowController()
    with running(controller) as runner:
        wait_for_passes(controller, 1)  # the first pass, at start
        time.sleep(PASS_SECONDS + 0.1)
        changed = time.monotonic()
        controller.during_pass.append((0.1, runner.trigger))
        runner.trigger()  # a burst: one change now, one early in the pass it starts
        wait_for_passes(controller, 3)
    second, third = controller.starts[1], controller.starts[2]
    assert second - changed >= DEBOUNCE - 0.05  # a change still waits the debounce
    # The change made 0.1 s into the second pass had waited the debounce when that pass
    # ended: the third pass follows at once, not DEBOUNCE after the second one's end.
    assert third - second < PASS_SECONDS + DEBOUNCE / 2


def test_a_change_late_in_a_pass_still_waits_the_debounce() -> None:
    controller = SlowController()
    with running(controller) as runner:
        wait_for_passes(controller, 1)
        changed: list[float] = []
        controller.during_pass.append(
            (PASS_SECONDS - 0.1, lambda: (changed.append(time.monotonic()), runner.trigger()))
        )
        time.sleep(PASS_SECONDS + 0.1)
        runner.trigger()
        wait_for_passes(controller, 3)
    assert controller.starts[2] - changed[0] >= DEBOUNCE - 0.05


class SupersededController(SlowController):
    """Every pass has a status write refused with 409 (a watch that lags behind)."""

    def run_pass(self) -> PassReport:
        self.starts.append(time.monotonic())
        return PassReport(superseded=1)


def test_refused_status_writes_back_off_until_the_watch_brings_the_change() -> None:
    controller = SupersededController()
    with running(controller) as runner:
        time.sleep(4.5)  # no change arrives: passes back off (1 s, 2 s, ...)
        backed_off = list(controller.starts)
        triggered = time.monotonic()
        runner.trigger()  # the newer profile arrives: a pass after the debounce
        wait_for_passes(controller, len(backed_off) + 1, seconds=DEBOUNCE + 1)
    gaps = [later - earlier for earlier, later in itertools.pairwise(backed_off)]
    assert len(backed_off) <= 3  # a debounce-paced loop would have made about six
    assert all(gap >= 1.0 for gap in gaps)
    # The trigger is not held to the backoff (4 s by then): one debounce.
    assert controller.starts[len(backed_off)] - triggered < DEBOUNCE + 0.5
