"""The one health server, as the operator uses it (probes from its own callbacks) and as the
node agent does (liveness by declared step bounds, readiness after the first good cycle)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from wcow_support.health import HealthServer, Probe, StepHealth


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def serving() -> Iterator[list[HealthServer]]:
    servers: list[HealthServer] = []
    yield servers
    for server in servers:
        server.stop()


def _serve(servers: list[HealthServer], live: Probe, ready: Probe) -> int:
    server = HealthServer(0, live, ready, host="127.0.0.1")
    server.start()
    servers.append(server)
    return server.port


def test_the_operators_probes_answer_from_their_callbacks(serving: list[HealthServer]) -> None:
    state = {"ready": False, "live": True}
    port = _serve(
        serving,
        lambda: (state["live"], "ok" if state["live"] else "stuck"),
        lambda: (state["ready"], "ok" if state["ready"] else "not yet"),
    )
    assert _get(port, "/healthz") == (200, "ok\n")
    assert _get(port, "/livez") == (200, "ok\n")
    assert _get(port, "/readyz") == (503, "not yet\n")
    state["ready"] = True
    assert _get(port, "/readyz?verbose") == (200, "ok\n")
    state["live"] = False
    assert _get(port, "/healthz") == (503, "stuck\n")
    assert _get(port, "/other")[0] == 404


def test_the_agents_step_health_served(serving: list[HealthServer]) -> None:
    now = [0.0]
    health = StepHealth(clock=lambda: now[0])
    port = _serve(serving, health.liveness, health.readiness)
    assert _get(port, "/healthz") == (200, "ok\n")
    assert _get(port, "/readyz") == (503, "first reconcile not finished\n")
    health.idle(ready=False, error="no plan yet")
    assert _get(port, "/readyz") == (503, "first reconcile not finished: no plan yet\n")
    health.busy(600)  # a canary may take its timeout
    now[0] = 700
    assert _get(port, "/healthz") == (503, "the reconcile loop is stuck past its own timeouts\n")
    health.idle(ready=True)
    assert _get(port, "/healthz") == (200, "ok\n")
    assert _get(port, "/readyz") == (200, "ok\n")
    health.stopping()
    assert _get(port, "/readyz") == (503, "shutting down\n")
    assert _get(port, "/other")[0] == 404


def test_liveness_fails_only_past_a_steps_own_bound() -> None:
    now = [0.0]
    health = StepHealth(clock=lambda: now[0])
    assert health.readiness()[0] is False
    health.busy(600)
    now[0] = 600
    assert health.liveness() == (True, "ok")
    now[0] = 700
    assert health.liveness()[0] is False
    health.idle(ready=True)
    assert health.liveness() == (True, "ok")
    assert health.readiness() == (True, "ok")
    health.idle(ready=False, error="a later failure")
    assert health.readiness() == (True, "ok")  # ready once is ready until shutdown


def test_stop_frees_the_port() -> None:
    server = HealthServer(0, lambda: (True, "ok"), lambda: (True, "ok"), host="127.0.0.1")
    server.start()
    port = server.port
    server.stop()
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
