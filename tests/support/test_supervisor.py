"""The supervisor of long-lived threads: stops in reverse order, joins within each grace,
and notices a thread that ended on its own."""

from __future__ import annotations

import threading
import time

from wcow_support.supervisor import Supervisor


def test_members_stop_last_started_first_each_joined_within_its_grace() -> None:
    supervisor = Supervisor()
    order: list[str] = []
    own_stop = threading.Event()

    def server() -> None:
        own_stop.wait()
        order.append("server")

    def loop() -> None:
        supervisor.stopping.wait()
        time.sleep(0.1)  # finishing its writes
        order.append("loop")

    supervisor.start("loop", loop, grace=5)
    supervisor.start("server", server, stop=own_stop.set, grace=5)
    assert supervisor.lost() == []
    assert supervisor.shutdown() == []
    assert order == ["server", "loop"]


def test_a_thread_that_will_not_stop_is_not_waited_for_past_its_grace() -> None:
    supervisor = Supervisor()
    release = threading.Event()
    supervisor.start("blocked-read", release.wait, grace=0.2)
    started = time.monotonic()
    assert supervisor.shutdown() == ["blocked-read"]
    assert time.monotonic() - started < 2
    release.set()


def test_a_thread_that_ends_on_its_own_is_lost_and_wait_says_so() -> None:
    supervisor = Supervisor()
    supervisor.start("steady", supervisor.stopping.wait)
    supervisor.start("crashes", lambda: None)
    time.sleep(0.1)
    assert supervisor.lost() == ["crashes"]
    assert supervisor.wait(threading.Event(), poll=0.01) is False
    supervisor.shutdown()
    assert supervisor.lost() == []  # ending after a stop is no loss


def test_wait_returns_when_asked_to_stop() -> None:
    supervisor = Supervisor()
    supervisor.start("steady", supervisor.stopping.wait, grace=5)
    terminated = threading.Event()
    threading.Timer(0.05, terminated.set).start()
    assert supervisor.wait(terminated, poll=0.01) is True
    assert supervisor.lost() == []
    assert supervisor.shutdown() == []


def test_an_adopted_thread_is_stopped_with_the_others() -> None:
    supervisor = Supervisor()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="library-server", daemon=True)
    thread.start()
    supervisor.adopt(thread, stop=stop.set, grace=5)
    assert supervisor.shutdown() == []
    assert not thread.is_alive()
