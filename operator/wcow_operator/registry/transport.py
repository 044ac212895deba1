"""One GET to a registry that ends at its deadline whatever the peer does.

A socket timeout bounds each ``recv``, not a request: a peer that sends its answer one byte
at a time, each within the timeout, holds a plain client for ever. Here every request runs on
a connection of its own, watched by one watchdog thread that shuts the socket down at the
deadline, so the read in progress fails at once and the lookup's thread is free again.

Every hop is held to the same rules (``policy``): the host is checked before its name is
resolved, every address it resolves to is checked, and the connection goes to the checked
address (a name that answers differently the second time cannot slip through). Names are
resolved as absolute (a trailing dot), so the pod's DNS search list (``ndots:5``) cannot turn
``registry.corp`` into ``registry.corp.<namespace>.svc.cluster.local``, a Service any tenant
who can create that namespace owns. Redirects are followed by hand, each hop checked again:
HTTPS unless the target is listed as insecure, and the Authorization header only to the
host it was meant for.

What the tenant is told about a failure says which registry and that it could not be read,
never how (a closed port, plain HTTP where TLS was expected and a certificate of another
authority all read the same); the operator's log has the detail.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

from urllib3.connection import HTTPConnection, HTTPSConnection

from wcow_contract.text import shown
from wcow_operator.registry.policy import HostPort, PolicyRefusal, RegistryPolicy, parse_hostport

log = logging.getLogger(__name__)

CHUNK: Final = 64 << 10
MAX_REDIRECTS: Final = 3  # registries send blob reads to storage (a CDN, S3) by redirect
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
Resolve = Callable[[str, int], list[str]]


class Failed(Exception):  # noqa: N818 - turned into a LookupFailure by the client
    """A lookup that ends: ``cause`` (the metric label) and ``message`` (safe to show)."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


class _Watchdog:
    """Shuts down the sockets of requests whose deadline passed (one thread for all)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._watched: dict[int, HTTPConnection] = {}
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, connection: HTTPConnection) -> int:
        with self._wake:
            token = next(self._ids)
            self._watched[token] = connection
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="registry-watchdog", daemon=True
                )
                self._thread.start()
            self._wake.notify()
            return token

    def release(self, token: int) -> None:
        with self._wake:
            self._watched.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(wait)
                _, token = heapq.heappop(self._heap)
                connection = self._watched.pop(token, None)
            if connection is not None:
                _sever(connection)


def _sever(connection: HTTPConnection) -> None:
    """The socket shut down under the read in progress (the plain socket's shutdown, not
    the TLS wrapper's, which would tear its state out from under the reading thread)."""
    sock = getattr(connection, "sock", None)
    if sock is None:
        return
    with contextlib.suppress(OSError):  # closed meanwhile: nothing left to stop
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


WATCHDOG: Final = _Watchdog()


def resolve_absolute(host: str, port: int) -> list[str]:
    """The addresses of ``host`` as an absolute name (never through the search list)."""
    found = socket.getaddrinfo(f"{host.rstrip('.')}.", port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in found]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes
    where: HostPort  # the host that gave this answer (after redirects)


@dataclass(frozen=True)
class Target:
    scheme: str
    where: HostPort
    path: str  # path and query, as sent

    def url(self) -> str:
        return f"{self.scheme}://{self.where.text()}{self.path}"


class Transport:
    def __init__(
        self, policy: RegistryPolicy, ca_file: str | None = None, resolve: Resolve | None = None
    ) -> None:
        self.policy, self.ca_file = policy, ca_file
        self.resolve = resolve or resolve_absolute

    def target(self, where: HostPort, path: str) -> Target:
        self.policy.check_host(where)
        return Target(self.policy.scheme(where), where, path)

    def get(
        self,
        target: Target,
        headers: Mapping[str, str],
        deadline: float,
        limit: int,
        *,
        authorization: tuple[HostPort, str] | None = None,
    ) -> Answer:
        """GET ``target`` within ``deadline``, following redirects; ``authorization`` is
        (the host it is for, the header value): sent to that host only."""
        for hops in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if authorization is not None and authorization[0] == target.where:
                sent["Authorization"] = authorization[1]
            status, answer, body = self._once(target, sent, deadline, limit, hops)
            location = answer.get("location")
            if status not in REDIRECT_STATUSES or not location:
                return Answer(status, answer, body, target.where)
            target = self._redirected(target, location)
        raise Failed(
            "ServerError", f"registry {shown(target.where.text(), 80)} redirects too often"
        )

    def _redirected(self, target: Target, location: str) -> Target:
        """The next hop, held to the same rules as the first; a refusal names only the
        registry the tenant wrote (where it pointed is theirs to know, not ours to confirm)."""
        origin = shown(target.where.text(), 80)
        try:
            parts = urlsplit(urljoin(target.url(), location[:2048]))
            where = parse_hostport(parts.netloc)
        except (ValueError, PolicyRefusal):
            raise Failed("Malformed", f"registry {origin} redirected to no valid URL") from None
        if parts.scheme not in ("https", "http"):
            raise Failed("Malformed", f"registry {origin} redirected to no valid URL")
        refused = PolicyRefusal(
            "NotAllowed",
            f"registry {origin} redirected to an address the image checks may not read "
            "(another host is held to the same rules: --allowed-registries, public addresses, "
            "HTTPS unless listed as insecure)",
        )
        if parts.scheme == "http" and self.policy.scheme(where) != "http":
            raise refused
        try:
            self.policy.check_host(where)
        except PolicyRefusal:
            raise refused from None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(parts.scheme, where, path)

    def _address(self, target: Target, deadline: float) -> str:
        where = target.where
        if where.ip is not None:
            return str(where.ip)
        port = where.port_for(target.scheme)
        try:
            addresses = self.resolve(where.host, port)
        except OSError as error:
            log.info("registry %s: name resolution failed: %s", where.text(), error)
            raise _unreachable(where) from None
        if time.monotonic() > deadline:
            raise _late(where)
        if not addresses:
            raise _unreachable(where)
        for address in addresses:
            self.policy.check_address(where, address)
        return addresses[0]

    def _once(
        self, target: Target, headers: Mapping[str, str], deadline: float, limit: int, hops: int
    ) -> tuple[int, Mapping[str, str], bytes]:
        where = target.where
        try:
            address = self._address(target, deadline)
        except PolicyRefusal as refusal:
            if not hops:
                raise
            raise PolicyRefusal(
                refusal.cause, "a redirect led to an address the image checks may not read"
            ) from None
        left = deadline - time.monotonic()
        if left <= 0:
            raise _late(where)
        connection = self._connection(target, address, left)
        token = WATCHDOG.watch(deadline, connection)
        try:
            connection.request(
                "GET",
                target.path,
                headers={**headers, "Host": where.text()},
                preload_content=False,
            )
            response = connection.getresponse()
            answer = {k.lower(): v for k, v in response.headers.items()}
            return response.status, answer, _read(response, answer, deadline, limit)
        except (Failed, PolicyRefusal):
            raise
        except Exception as error:  # noqa: BLE001 - a registry is untrusted input: any
            # failure to talk to it is a refusal with a sentence, never an exception
            log.info("registry %s: %s: %s", where.text(), type(error).__name__, error)
            if time.monotonic() >= deadline:
                raise _late(where) from None
            raise _unreachable(where) from None
        finally:
            WATCHDOG.release(token)
            connection.close()

    def _connection(self, target: Target, address: str, left: float) -> HTTPConnection:
        port = target.where.port_for(target.scheme)
        timeout = left  # each connect and read; the watchdog bounds the whole request
        if target.scheme == "http":
            return HTTPConnection(address, port, timeout=timeout)
        host = target.where.host
        return HTTPSConnection(
            address,
            port,
            timeout=timeout,
            server_hostname=None if target.where.ip is not None else host,
            assert_hostname=host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=self.ca_file,
        )


def _unreachable(where: HostPort) -> Failed:
    return Failed("Unreachable", f"registry {shown(where.text(), 80)} cannot be reached")


def _late(where: HostPort) -> Failed:
    return Failed("Timeout", f"registry {shown(where.text(), 80)} did not answer in time")


def _read(response: Any, headers: Mapping[str, str], deadline: float, limit: int) -> bytes:
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Failed("TooLarge", f"the registry announced {declared} bytes, above {limit}")
    body = bytearray()
    while chunk := response.read1(CHUNK):
        body += chunk
        if len(body) > limit:
            raise Failed("TooLarge", f"the registry sent more than {limit} bytes")
        if time.monotonic() > deadline:
            raise Failed("Timeout", "the registry's answer did not arrive in time")
    if time.monotonic() >= deadline:  # the watchdog ended the read: the body is cut short
        raise Failed("Timeout", "the registry's answer did not arrive in time")
    return bytes(body)
