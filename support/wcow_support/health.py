"""The kubelet's probes, one implementation for both binaries.

``HealthServer`` answers ``/healthz`` (and its alias ``/livez``) and ``/readyz`` from two
callbacks, each returning ``(ok, text)``: 200 or 503 with the text as the body. It runs on a
small HTTP server of its own, so a busy or stuck program still answers (and says it is stuck).

``StepHealth`` is the state behind those callbacks for a loop whose steps may take long on
purpose (a containerd restart, a canary): each step declares how long it may take, and only
overrunning that bound (plus a grace) fails liveness, so a long step is never a reason to kill
the program in the middle of it. Readiness turns true after the first good step and false
again while shutting down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Probe = Callable[[], tuple[bool, str]]

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the kubelet probes the pod IP
# Grace beyond a step's declared bound before liveness fails.
STALL_GRACE_SECONDS = 60.0


class HealthServer:
    def __init__(self, port: int, live: Probe, ready: Probe, host: str = ALL_INTERFACES) -> None:
        probes = {"/healthz": live, "/livez": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                probe = probes.get(self.path.split("?", 1)[0])
                if probe is None:
                    self.send_error(404)
                    return
                ok, text = probe()
                body = f"{text}\n".encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # probes every few seconds would drown the log

        self.server = ThreadingHTTPServer((host, port), Handler)
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


class StepHealth:
    """Liveness by declared step bounds, readiness after the first good step."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._busy_until: float | None = None
        self._ready = False
        self._stopping = False
        self._last_error = ""

    def busy(self, seconds: float) -> None:
        """A step begins that may take up to ``seconds``."""
        with self._lock:
            self._busy_until = self.clock() + seconds + STALL_GRACE_SECONDS

    def idle(self, ready: bool, error: str = "") -> None:
        """The step ended; ``ready`` once it went well (readiness then stays)."""
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
