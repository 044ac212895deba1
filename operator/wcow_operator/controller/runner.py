"""When passes run: on watch events (debounced), on a timer, at once for a node's report (the
hand-over), and after a backoff when a pass failed.

The runner reads the time and waits only through its ``Clock``: the system's in the
operator, a test's that drives time instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from wcow_support.retry import Backoff

if TYPE_CHECKING:
    from wcow_operator.controller.controller import Controller

# Hand-overs (rollout writes between passes) are spaced by the fleet's size: a write reaches
# every agent's watch, so writing once per finished node would cost N x N events per
# rollout. At most this many agent deliveries a second (200 nodes: a write per 0.1 s; 2000:
# per 1 s), and never closer than the floor nor further apart than the ceiling.
HAND_OVER_DELIVERIES_PER_SECOND = 2000
HAND_OVER_FLOOR_SECONDS = 0.05
HAND_OVER_CEILING_SECONDS = 1.0


def hand_over_spacing(nodes: int) -> float:
    """Seconds between two hand-overs' rollout writes for a fleet of ``nodes``."""
    spacing = nodes / HAND_OVER_DELIVERIES_PER_SECOND
    return min(HAND_OVER_CEILING_SECONDS, max(HAND_OVER_FLOOR_SECONDS, spacing))


class Clock(Protocol):
    """The time source and the wait of a runner."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Until ``event`` is set, at most ``timeout`` seconds (None: no limit); whether it
        is set."""
        ...


class SystemClock:
    """``time.monotonic`` and ``threading.Event.wait``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


SYSTEM_CLOCK = SystemClock()


class Runner:
    """Runs passes when triggered (watch events) or every ``resync_seconds``; coalesces
    bursts of events into one pass, and backs off after failures.

    The debounce counts from the first change the last pass did not see: a change waits
    ``debounce_seconds`` for more, never longer. Changes that arrived while a pass wrote
    (a burst longer than the pass) are handled as soon as it ends if they waited that long
    already, not a whole debounce after it."""

    def __init__(
        self,
        controller: Controller,
        resync_seconds: float,
        debounce_seconds: float = 0.5,
        max_backoff_seconds: float = 60.0,
        hand_over_seconds: float | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.controller = controller
        self.resync_seconds = resync_seconds
        self.debounce_seconds = debounce_seconds
        self.backoff = Backoff(initial=1.0, maximum=max_backoff_seconds)
        self.clock = clock
        self._dirty = threading.Event()
        self._changes = threading.Lock()
        self._changed_at: float | None = None  # clock time of the first unseen change
        self._report = threading.Event()  # a node's report changed: hand over at once
        # None: spaced by the fleet's size (``hand_over_spacing``), else this fixed spacing.
        self.hand_over_seconds = hand_over_seconds
        self._handed_over: float | None = None  # clock time of the last hand-over
        self.last_pass_ok: float | None = None
        self.heartbeat = clock.monotonic()

    def trigger(self) -> None:
        with self._changes:
            if self._changed_at is None:
                self._changed_at = self.clock.monotonic()
            self._dirty.set()

    def _seen(self) -> None:
        """The pass about to run reads the cache as it is now: every change so far."""
        with self._changes:
            self._dirty.clear()
            self._changed_at = None

    def reported(self) -> None:
        """A node's report changed: the rollout decision runs at once (``hand_over``), the
        whole pass after the debounce as for any change."""
        self._report.set()
        self.trigger()

    def _debounce(self, stop: threading.Event) -> None:
        """Wait ``debounce_seconds`` for more changes, handing over slots meanwhile: at once,
        but at most one rollout write per ``hand_over_spacing`` of the fleet (or per
        ``hand_over_seconds`` when given), since every rollout write goes to every agent's
        watch (nodes finishing together are let in by one write). A
        report that changes no decision (a node recording its attempt) writes nothing, so it
        does not hold back the next report's hand-over. Counted from the first unseen change
        (from now when the resync timer woke the runner)."""
        clock = self.clock
        with self._changes:
            since = self._changed_at if self._changed_at is not None else clock.monotonic()
        deadline = since + self.debounce_seconds
        while not stop.is_set():
            now = clock.monotonic()
            due = self._hand_over_due()
            if self._report.is_set() and now >= due:
                self._report.clear()
                if self.controller.hand_over():
                    self._handed_over = clock.monotonic()
                continue
            if now >= deadline:
                return
            if self._report.is_set():
                clock.wait(stop, min(deadline, due) - now)
            else:
                clock.wait(self._report, deadline - now)

    def _hand_over_due(self) -> float:
        """When the next hand-over may write (clock time)."""
        if self._handed_over is None:
            return 0.0
        spacing = self.hand_over_seconds
        if spacing is None:
            spacing = hand_over_spacing(self.controller.cache.counts()["nodes"])
        return self._handed_over + spacing

    def run(self, stop: threading.Event) -> None:
        clock = self.clock
        # Never plan from a half-filled cache: a profile not listed yet would look deleted.
        while not self.controller.cache.synced():
            self.heartbeat = clock.monotonic()
            if clock.wait(stop, 0.1):
                return
        delays = self.backoff.delays()
        wait = 0.0  # first pass right away
        while not stop.is_set():
            self.heartbeat = clock.monotonic()
            clock.wait(self._dirty, wait)
            if stop.is_set():
                return
            self._debounce(stop)
            self._seen()
            report = self.controller.run_pass()
            self.heartbeat = clock.monotonic()
            if report.errors:
                # Level-triggered: the next pass re-reads everything, so waiting is enough.
                clock.wait(stop, next(delays))
                wait = 0.0
            else:
                self.last_pass_ok = clock.monotonic()
                # While a node drains, look again soon (at once when one is drained); a
                # permission that times out is judged when it does.
                due = [t for t in (report.again_in, report.wake_in) if t is not None]
                if report.superseded:
                    # The watch brings the newer profile, and its trigger ends the wait;
                    # a watch that lags gets the backoff, not a 409 every debounce.
                    wait = min([self.resync_seconds, *due, next(delays)])
                else:
                    wait, delays = min([self.resync_seconds, *due]), self.backoff.delays()
