"""How a replica's webhook starts and stops serving, over real sockets: kopf's server as the
operator runs it (``ClosingWhenDraining``) keeps its connections open until the replica
drains, then each answer says ``Connection: close``, so a caller holding a pooled connection
opens its next one through the Service; and the replica is ready only once its webhook
accepts connections (tests/faults/test_webhook_restart.py is the whole story)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from tests.e2e.operator_harness import free_port
from wcow_operator.manager.probes import Probes
from wcow_operator.webhook.server import ClosingWhenDraining

if TYPE_CHECKING:
    from wcow_operator.controller.runner import Runner


async def _answer(_: Any, **__: Any) -> dict[str, Any]:
    return {"response": {"allowed": True}}


@pytest.fixture
def served() -> Iterator[tuple[int, threading.Event]]:
    """The server on a free port (plain HTTP: TLS is not what this is about)."""
    draining, port = threading.Event(), free_port()
    loop = asyncio.new_event_loop()
    listening = threading.Event()

    async def serve() -> None:
        server = ClosingWhenDraining(draining, addr="127.0.0.1", port=port, insecure=True)
        async with server:
            async for _ in server(_answer):
                listening.set()

    task = loop.create_task(serve())

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert listening.wait(10)
    try:
        yield port, draining
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout=10)
        loop.close()


def _review(connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
    connection.request("POST", "/validate", json.dumps({"request": {"uid": "1"}}))
    response = connection.getresponse()
    response.read()
    assert response.status == 200
    return response


def test_answers_close_their_connection_once_draining(
    served: tuple[int, threading.Event],
) -> None:
    port, draining = served
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        first = _review(connection)
        assert first.getheader("Connection") != "close"
        assert not first.will_close
        _review(connection)  # the same connection, kept alive
        draining.set()
        last = _review(connection)  # still answered while draining ...
        assert last.getheader("Connection") == "close"  # ... and the caller told to go
        assert last.will_close
    finally:
        connection.close()


def test_a_replica_is_ready_only_once_its_webhook_accepts_connections() -> None:
    """Found by tests/faults/test_webhook_restart.py: a restarted replica said ready before
    kopf listened, the Service sent it calls, and the API server refused the pods."""
    port = free_port()
    runner = cast("Runner", SimpleNamespace(heartbeat=time.monotonic(), last_pass_ok=None))
    probes = Probes(runner, threading.Event(), None, 300.0, webhook_port=port)
    assert probes.ready() == (False, "the webhook server does not accept connections yet")
    with socket.create_server(("127.0.0.1", port)):
        assert probes.ready() == (True, "standby")
    probes.draining.set()
    assert probes.ready() == (False, "shutting down")
