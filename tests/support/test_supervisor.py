"""The supervisor of long-lived threads: stops in reverse order, joins within each grace,
and notices a thread that ended on its own.

Time is driven, not slept: the supervisor waits through a ``DrivenClock``, whose time moves
only when the supervisor waits, and, while it joins a member, only once that member sleeps on
the clock. A member's own work takes no time there, so no assertion depends on how fast the
machine runs the threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from wcow_support.supervisor import Supervisor


class DrivenClock:
    """The supervisor's ``Clock``, with the members' sleeps and timers on the same time."""

    # A joined thread that neither ends nor sleeps on the clock within this much real time
    # is a broken test (it blocks on something the clock cannot move), not a slow machine.
    REAL_BOUND = 30.0

    def __init__(self) -> None:
        self.now = 0.0
        self._changed = threading.Condition()
        self._sleepers: dict[threading.Thread, float] = {}
        self._timers: list[tuple[float, Callable[[], None]]] = []

    def sleep(self, seconds: float) -> None:
        """A member's step that takes ``seconds`` of the clock's time."""
        me = threading.current_thread()
        with self._changed:
            wake = self.now + seconds
            self._sleepers[me] = wake
            self._changed.notify_all()
            while self.now < wake:
                self._changed.wait()
            del self._sleepers[me]
            self._changed.notify_all()

    def call_at(self, moment: float, action: Callable[[], None]) -> None:
        with self._changed:
            self._timers.append((moment, action))

    def advance(self, seconds: float) -> None:
        with self._changed:
            self._move_to(self.now + seconds)

    def _move_to(self, moment: float, until: threading.Event | None = None) -> None:
        # Holding the lock: fire the timers due by ``moment`` in order, stopping at the one
        # that sets ``until`` (an event wait returns as soon as its event is set).
        for due, action in sorted((t for t in self._timers if t[0] <= moment), key=lambda t: t[0]):
            self._timers.remove((due, action))
            self.now = max(self.now, due)
            action()
            if until is not None and until.is_set():
                break
        else:
            self.now = max(self.now, moment)
        self._changed.notify_all()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        with self._changed:
            if not event.is_set():
                self._move_to(self.now + timeout, until=event)
        return event.is_set()

    def join(self, thread: threading.Thread, timeout: float) -> None:
        deadline = self.now + timeout
        give_up = time.monotonic() + self.REAL_BOUND
        with self._changed:
            while thread.is_alive():
                wake = self._sleepers.get(thread)
                if wake is None or wake <= self.now:  # working: no time passes for it
                    assert time.monotonic() < give_up, f"{thread.name} neither ends nor sleeps"
                    self._changed.wait(0.01)
                elif wake > deadline:
                    self._move_to(deadline)
                    return
                else:
                    self._move_to(wake)


def test_members_stop_last_started_first_each_joined_within_its_grace() -> None:
    clock = DrivenClock()
    supervisor = Supervisor(clock)
    order: list[str] = []
    own_stop = threading.Event()

    def server() -> None:
        own_stop.wait()
        order.append("server")

    def loop() -> None:
        supervisor.stopping.wait()
        clock.sleep(0.1)  # finishing its writes
        order.append("loop")

    supervisor.start("loop", loop, grace=5)
    supervisor.start("server", server, stop=own_stop.set, grace=5)
    assert supervisor.lost() == []
    assert supervisor.shutdown() == []
    assert order == ["server", "loop"]
    assert clock.now == 0.1  # waited for the loop's writes, not for the whole grace


def test_a_thread_that_will_not_stop_is_not_waited_for_past_its_grace() -> None:
    clock = DrivenClock()
    supervisor = Supervisor(clock)
    supervisor.start("blocked-read", lambda: clock.sleep(3600), grace=0.2)
    started = clock.now
    assert supervisor.shutdown() == ["blocked-read"]
    assert clock.now - started == 0.2  # its grace, and not a moment more
    clock.advance(3600)  # the read returns: the thread ends


def test_a_thread_that_ends_on_its_own_is_lost_and_wait_says_so() -> None:
    clock = DrivenClock()
    supervisor = Supervisor(clock)
    supervisor.start("steady", supervisor.stopping.wait)
    supervisor.start("crashes", lambda: None).join()
    assert supervisor.lost() == ["crashes"]
    assert supervisor.wait(threading.Event(), poll=0.01) is False
    assert clock.now == 0.01  # noticed at the first poll
    supervisor.shutdown()
    assert supervisor.lost() == []  # ending after a stop is no loss


def test_wait_returns_when_asked_to_stop() -> None:
    clock = DrivenClock()
    supervisor = Supervisor(clock)
    supervisor.start("steady", supervisor.stopping.wait, grace=5)
    terminated = threading.Event()
    clock.call_at(0.05, terminated.set)
    assert supervisor.wait(terminated, poll=0.01) is True
    assert clock.now == 0.05  # as soon as it was asked
    assert supervisor.lost() == []
    assert supervisor.shutdown() == []


def test_an_adopted_thread_is_stopped_with_the_others() -> None:
    supervisor = Supervisor(DrivenClock())
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="library-server", daemon=True)
    thread.start()
    supervisor.adopt(thread, stop=stop.set, grace=5)
    assert supervisor.shutdown() == []
    assert not thread.is_alive()
