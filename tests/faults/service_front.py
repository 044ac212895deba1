"""A loopback stand-in for the Kubernetes Service in front of the webhook replicas.

On a cluster the API server calls the webhook's Service; kube-proxy (iptables or IPVS) picks
one of the ready endpoints of its EndpointSlices for each new TCP connection, and a
connection, once made, stays with its replica (conntrack) until one side closes it. An
endpoint leaves the slices when its pod stops being ready or starts terminating, and kube-proxy
sends it no new connection from then on; a connection to an endpoint that no longer listens is
refused (reset), never retried on another one. The fault suite has no kubelet nor kube-proxy,
so ``ServiceFront`` does the same on 127.0.0.1: it polls each replica's ``/readyz`` every
``PROBE_SECONDS`` (the readiness probe and the endpoints' propagation in one), hands each new
connection to the next ready replica, pipes the bytes both ways (TLS passes through: the
replicas' certificates are what the API server checks) and resets the caller's connection when
the chosen replica refuses it or none is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

PROBE_SECONDS = 1.0  # how late the front learns that a replica is (no longer) ready
CHUNK = 64 * 1024


@dataclass
class Endpoint:
    """One replica: its webhook port and its health port; what the front saw of it."""

    name: str
    port: int
    health: int
    ready: bool = False
    connections: int = 0  # connections handed to it and accepted
    refused: int = 0  # connections handed to it that it refused (reset to the caller)
    open: int = 0  # its connections open now


def _ready(health: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class ServiceFront:
    """Listens on ``port`` (127.0.0.1) once started; ``endpoints`` by name."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        self.endpoints = {e.name: e for e in endpoints}
        self.port = 0
        self.no_endpoint = 0  # connections reset because no replica was ready
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._closing = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()
        self._stop = threading.Event()
        self._started = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, name="front", daemon=True),
            threading.Thread(target=self._probe, name="front-probe", daemon=True),
        ]

    def _probe(self) -> None:
        while not self._stop.is_set():
            for endpoint in self.endpoints.values():
                endpoint.ready = _ready(endpoint.health)
            self._stop.wait(PROBE_SECONDS)

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=CHUNK)
        self.port = int(server.sockets[0].getsockname()[1])
        self._started.set()
        await self._closing.wait()
        server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()

    def _pick(self) -> Endpoint | None:
        ready = [e for e in self.endpoints.values() if e.ready]
        if not ready:
            return None
        self._next += 1
        return ready[self._next % len(ready)]

    async def _handle(self, caller: asyncio.StreamReader, back: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._forward(caller, back)
        finally:
            back.close()
            self._handlers.discard(task)

    async def _forward(self, caller: asyncio.StreamReader, back: asyncio.StreamWriter) -> None:
        endpoint = self._pick()
        if endpoint is None:
            self.no_endpoint += 1
            back.transport.abort()
            return
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        except OSError:
            endpoint.refused += 1
            back.transport.abort()
            return
        endpoint.connections += 1
        endpoint.open += 1
        try:
            await asyncio.gather(_pipe(caller, writer), _pipe(reader, back))
        finally:
            endpoint.open -= 1
            writer.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[ServiceFront]:
        for thread in self._threads:
            thread.start()
        assert self._started.wait(10), "the front did not start"
        try:
            yield self
        finally:
            self._stop.set()
            self._loop.call_soon_threadsafe(self._closing.set)
            for thread in self._threads:
                thread.join(timeout=10)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from ``source`` to ``sink`` until end of file, passed on as end of file (a
    half close, as TCP through kube-proxy); a reset on either side resets the other."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.transport.abort()
