"""/healthz and /readyz on a small HTTP server of their own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Probe = Callable[[], tuple[bool, str]]


ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the kubelet probes the pod IP


def serve_health(
    port: int, live: Probe, ready: Probe, host: str = ALL_INTERFACES
) -> ThreadingHTTPServer:
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

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
