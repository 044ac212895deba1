"""The operator's HTTP endpoints: /healthz and /readyz (``Probes``) and the threads of its
HTTP servers (probes and metrics), which answer until the process ends."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

import prometheus_client

from wcow_operator.controller.metrics import Metrics
from wcow_operator.controller.runner import Runner
from wcow_operator.webhook.configurations import WebhookKeeper
from wcow_support.health import HealthServer
from wcow_support.supervisor import Supervisor


@dataclass
class Probes:
    """/healthz and /readyz."""

    runner: Runner
    leading: threading.Event
    keeper: WebhookKeeper | None
    resync_seconds: float
    draining: threading.Event = field(default_factory=threading.Event)
    webhook_port: int | None = None  # with the webhook: ready only once it accepts calls

    def live(self) -> tuple[bool, str]:
        # A reconciler stuck for several resync periods is not alive; standby replicas are.
        quiet = self.runner.clock.monotonic() - self.runner.heartbeat
        stuck = self.leading.is_set() and quiet > max(3 * self.resync_seconds, 120)
        return (not stuck, "stuck" if stuck else "ok")

    def ready(self) -> tuple[bool, str]:
        if self.draining.is_set():
            return False, "shutting down"
        # Every replica serves the webhook: the Service may send it a pod only once it knows
        # the profiles and the API server trusts its certificate.
        if self.keeper is not None and not self.keeper.published.is_set():
            return False, "the API server does not trust this replica's webhook certificate yet"
        if self.webhook_port is not None and not accepts(self.webhook_port):
            # kopf listens only once it has logged in and started: a Service sending calls
            # here before that gets them refused, and the API server refuses the pods.
            return False, "the webhook server does not accept connections yet"
        if not self.leading.is_set():
            return True, "standby"
        ok = self.runner.last_pass_ok is not None
        return ok, "ok" if ok else "no successful reconcile yet"


def accepts(port: int) -> bool:
    """Something accepts TCP connections on this host's ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def serve_http(name: str, supervisor: Supervisor, thread: threading.Thread) -> None:
    """An HTTP server's thread (metrics, probes): never stopped, it answers until the process
    ends, so the kubelet sees this replica unready but alive while it shuts down."""
    thread.name = name
    supervisor.adopt(thread, stop=lambda: None)


def serve_metrics(port: int, metrics: Metrics, supervisor: Supervisor) -> None:
    """/metrics on ``port``, in a thread of its own."""
    _, thread = prometheus_client.start_http_server(port, registry=metrics.registry)
    serve_http("metrics", supervisor, thread)


def serve_probes(port: int, probes: Probes, supervisor: Supervisor) -> None:
    """/healthz and /readyz on ``port``, in a thread of its own."""
    health = HealthServer(port, probes.live, probes.ready)
    health.start()
    serve_http("health", supervisor, health.thread)
