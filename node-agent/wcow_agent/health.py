"""``/healthz`` and ``/readyz`` (``--health-port``, default 9552) for the kubelet's probes.

- ``/healthz``: 200 while the reconcile loop is alive and not stuck: each step declares how
  long it may take (restart timeouts, canary timeouts), and only overrunning that fails
  the probe. A long canary is not a reason to kill the agent mid-canary.
- ``/readyz``: 200 once the first cycle completed (plan read, config checked, Node
  reported), 503 before and while shutting down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Grace beyond a step's declared bound before /healthz fails.
STALL_GRACE_SECONDS = 60.0


class Health:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._busy_until: float | None = None
        self._ready = False
        self._stopping = False
        self._last_error = ""

    def busy(self, seconds: float) -> None:
        with self._lock:
            self._busy_until = self.clock() + seconds + STALL_GRACE_SECONDS

    def idle(self, ready: bool, error: str = "") -> None:
        with self._lock:
            self._busy_until = None
            self._ready = self._ready or ready
            self._last_error = error

    def stopping(self) -> None:
        with self._lock:
            self._stopping = True

    def liveness(self) -> tuple[bool, str]:
        with self._lock:
            if self._busy_until is not None and self.clock() > self._busy_until:
                return False, "the reconcile loop is stuck past its own timeouts"
            return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        with self._lock:
            if self._stopping:
                return False, "shutting down"
            if not self._ready:
                return False, "first reconcile not finished" + (
                    f": {self._last_error}" if self._last_error else ""
                )
            return True, "ok"


class HealthServer:
    def __init__(self, health: Health, port: int, address: str = "") -> None:
        probes = {"/healthz": health.liveness, "/readyz": health.readiness}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                probe = probes.get(self.path.split("?", 1)[0])
                if probe is None:
                    self.send_error(404)
                    return
                ok, text = probe()
                body = (text + "\n").encode("utf-8")
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # probes every few seconds would drown the agent's own log

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
