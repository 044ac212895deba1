"""A clock for a runner under test (``controller.runner.Clock``): time moves only when the
runner waits, straight to the next scheduled action or to the end of its wait, so a test of
seconds of debounce and backoff runs in milliseconds and never depends on the machine's load.

The runner runs in the test's own thread; whatever else happens (a watch event, a node's
report, the end of the test) is scheduled at a time on this clock with ``at``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable


class VirtualClock:
    def __init__(self, *, horizon: float = 10_000.0) -> None:
        self.now = 0.0
        self.horizon = horizon  # a runner still waiting this late is a test that never ends
        self.waits: list[tuple[threading.Event, float | None]] = []  # every wait, in order
        self._queue: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()
        self._idle = 0  # waits in a row that ended at once, with nothing happening

    def monotonic(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], object]) -> None:
        """Run ``action`` when the clock reaches ``when`` (at once if it has)."""
        heapq.heappush(self._queue, (when, next(self._order), action))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        self.waits.append((event, timeout))
        deadline = math.inf if timeout is None else self.now + max(timeout, 0.0)
        while not event.is_set():
            if self._queue and self._queue[0][0] <= deadline:
                when, _, action = heapq.heappop(self._queue)
                self.now = max(self.now, when)
                action()
                continue
            if deadline == math.inf:
                raise AssertionError("waiting for ever: nothing is scheduled to happen")
            self._idle = self._idle + 1 if deadline == self.now else 0
            if self._idle > 10_000:
                raise AssertionError(f"the runner spins at {self.now:g} s: it waits for nothing")
            self.now = deadline
            if self.now > self.horizon:
                raise AssertionError(f"still waiting at {self.now:g} s of virtual time")
            return False
        self._idle = 0
        return True

    def sleep(self, seconds: float) -> None:
        """``seconds`` pass (what is scheduled meanwhile happens)."""
        self.wait(threading.Event(), seconds)
