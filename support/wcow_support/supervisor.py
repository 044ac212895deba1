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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Member:
    thread: threading.Thread
    stop: Callable[[], None]
    grace: float


class Supervisor:
    def __init__(self) -> None:
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
        while not until.wait(poll):
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
                member.thread.join(member.grace)
        running = [m.thread.name for m in members if m.thread.is_alive()]
        if running:
            log.debug("left to end with the process: %s", ", ".join(running))
        return running
