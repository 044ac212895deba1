"""Small hostile servers on loopback, as a tenant who runs a "registry" would: raw TCP with
a handler of our own (a slow head, a malformed header), over TLS when asked, with a CA the
test can trust or not."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from tests.control_plane import _certificate, _key, _name, _pem_key

Handler = Callable[[socket.socket], None]


@dataclass
class Server:
    host: str  # 127.0.0.1:PORT
    ca_file: Path | None
    connections: list[float]  # how many connections it accepted (a count, by time)


def _tls_context(workdir: Path) -> tuple[ssl.SSLContext, Path]:
    ca_key, key = _key(), _key()
    ca = _certificate(_name("hostile-ca"), ca_key, None)
    cert = _certificate(_name("hostile"), key, (ca, ca_key), server=True)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (workdir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (workdir / "tls.key").write_bytes(_pem_key(key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
    return context, workdir / "ca.crt"


@contextlib.contextmanager
def serving(handler: Handler, workdir: Path | None = None) -> Iterator[Server]:
    """``handler`` runs for each connection in a thread of its own; TLS when ``workdir``."""
    listener = socket.create_server(("127.0.0.1", 0))
    context, ca_file = _tls_context(workdir) if workdir is not None else (None, None)
    server = Server(f"127.0.0.1:{listener.getsockname()[1]}", ca_file, [])
    stop = threading.Event()

    def serve_one(sock: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            if context is not None:
                sock = context.wrap_socket(sock, server_side=True)
            handler(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server.connections.append(1.0)
            threading.Thread(target=serve_one, args=(sock,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def read_head(sock: socket.socket) -> bytes:
    """The request's head (up to the blank line), or what came before the peer stopped."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def answer(sock: socket.socket, status: str, headers: dict[str, str], body: bytes = b"") -> None:
    read_head(sock)
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(head.encode("latin-1") + b"\r\n" + body)


def dribble(sock: socket.socket) -> None:
    """A response head one byte every 0.3 s, for up to 12 s: each read within any per-read
    timeout, the whole never."""
    read_head(sock)
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 3:
        sock.sendall(bytes([byte]))
        time.sleep(0.3)
