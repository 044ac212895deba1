"""The long-lived threads of a program, owned in one place.

Every thread that should run as long as the program does is started (or, for a library's
own thread, adopted) here with a name, a way to stop it and how long to wait for it. The
supervisor stops them in the reverse order of starting, each joined within its own grace, so
what serves the outside (a webhook server) stops before what feeds it (the watches), and what
must finish (a reconcile pass writing) gets the time it needs while a thread blocked in a
long read is not waited for. Threads are daemons: one that does not stop in its grace ends
with the process.

A member that ends before shutdown began is lost: each loop here catches its own failures,
so that is a bug, and ``wait`` reports it so the program exits rather than runs on without it.

The supervisor lets time pass only through its ``Clock`` (waiting on an event, joining a
thread, each for at most so long), so a test drives that time instead of sleeping through it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


class Clock(Protocol):
    """How the supervisor waits: at most ``timeout`` seconds each time."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Until ``event`` is set (True) or ``timeout`` passed (False)."""
        ...

    def join(self, thread: threading.Thread, timeout: float) -> None:
        """Until ``thread`` ended or ``timeout`` passed."""
        ...


class SystemClock:
    """The clock of the running program: the threads' own blocking waits."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)

    def join(self, thread: threading.Thread, timeout: float) -> None:
        thread.join(timeout)


@dataclass(frozen=True)
class _Member:
    thread: threading.Thread
    stop: Callable[[], None]
    grace: float


class Supervisor:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.stopping = threading.Event()  # the stop flag the members' loops watch
        self._members: list[_Member] = []
        self._lock = threading.Lock()
        self._shutdown = threading.Event()

    def start(
        self,
        name: str,
        target: Callable[[], object],
        *,
        stop: Callable[[], None] | None = None,
        grace: float = 0.0,
    ) -> threading.Thread:
        """Run ``target`` in a daemon thread called ``name`` until it is stopped: by
        ``stop`` if given, else by the shared ``stopping`` flag; joined for ``grace``
        seconds at shutdown."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        self.adopt(thread, stop=stop, grace=grace)
        thread.start()
        return thread

    def adopt(
        self,
        thread: threading.Thread,
        *,
        stop: Callable[[], None] | None = None,
        grace: float = 0.0,
    ) -> None:
        """A thread some library started (an HTTP server's), to stop and join like ours."""
        with self._lock:
            self._members.append(_Member(thread, stop or self.stopping.set, grace))

    def lost(self) -> list[str]:
        """The members that ended although nothing asked them to stop."""
        if self._shutdown.is_set() or self.stopping.is_set():
            return []
        with self._lock:
            return [
                m.thread.name for m in self._members if m.thread.ident and not m.thread.is_alive()
            ]

    def wait(self, until: threading.Event, poll: float = 0.5) -> bool:
        """Block until ``until`` is set (True) or a member is lost (False, logged)."""
        while not self.clock.wait(until, poll):
            lost = self.lost()
            if lost:
                log.error("thread %s ended on its own (see above)", ", ".join(lost))
                return False
        return True

    def shutdown(self) -> list[str]:
        """Stop every member, the last started first, waiting for each up to its grace;
        the names of those still running after."""
        self._shutdown.set()
        with self._lock:
            members = list(reversed(self._members))
        for member in members:
            member.stop()
            if member.thread.ident is not None:  # started
                self.clock.join(member.thread, member.grace)
        running = [m.thread.name for m in members if m.thread.is_alive()]
        if running:
            log.debug("left to end with the process: %s", ", ".join(running))
        return running
