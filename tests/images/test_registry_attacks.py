"""The image checks under attack, as a tenant who can create pods and run a server: each
attack is refused or harmless, in bounded time, with a sentence that says what the tenant may
know and nothing of the network behind."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.images.hostile import answer, dribble, read_head, serving
from tests.registry import Registry, require_registry, running
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.credentials import Credential, scoped_credentials
from wcow_operator.registry.facts import ImageFacts, LookupFailure
from wcow_operator.registry.resolver import Resolver

WS2022 = "10.0.20348.2655"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    require_registry()
    with running(tmp_path / "registry") as started:
        yield started


@pytest.mark.parametrize("tls", [False, True])
def test_a_registry_that_dribbles_its_answer_is_cut_at_the_deadline(
    tmp_path: Path, tls: bool
) -> None:
    with serving(dribble, tmp_path if tls else None) as slow:
        listed = {"insecure": frozenset({slow.host})} if not tls else {"allowed": (slow.host,)}
        client = RegistryClient(ca_file=str(slow.ca_file) if tls else None, **listed)  # type: ignore[arg-type]
        started = time.monotonic()
        found = client.lookup(f"{slow.host}/team/app:1", 1.0)
        took = time.monotonic() - started
    assert isinstance(found, LookupFailure)
    assert found.cause == "Timeout"
    assert took < 1.5, took


def test_slow_images_of_one_pod_leave_the_workers_to_others(
    tmp_path: Path, registry: Registry
) -> None:
    """Eight dribbling images in one pod hold no worker past their deadline, and at most
    their namespace's share meanwhile: another tenant's image is read at once."""
    registry.push_image("wcow/app", WS2022, tag="ltsc2022")
    with serving(dribble) as slow:
        client = RegistryClient(insecure=frozenset({slow.host, registry.host}))
        resolver = Resolver(client, timeout=1.0)
        try:
            attack = [f"{slow.host}/team/app{n}:1" for n in range(8)]
            flood = threading.Thread(target=resolver.resolve, args=(attack, "tenant-a"))
            flood.start()
            time.sleep(0.2)
            started = time.monotonic()
            victim = resolver.resolve([registry.reference("wcow/app", "ltsc2022")], "tenant-b")
            took = time.monotonic() - started
            flood.join()
            assert isinstance(next(iter(victim.values())), ImageFacts), victim
            assert took < 0.5, took
            time.sleep(0.3)  # the attack's lookups ended at their deadline: workers are free
            assert resolver.workers.held("") == 0
        finally:
            resolver.shutdown()


def test_registry_names_are_resolved_as_absolute_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """``registry.corp`` is never looked up through the pod's search list, where the cluster
    DNS would answer ``registry.corp.<namespace>.svc.cluster.local``, a tenant's Service."""
    asked: list[str] = []

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list[object]:
        asked.append(host)
        raise socket.gaierror("not here")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    found = RegistryClient(allowed=("registry.corp:*",)).lookup("registry.corp:5000/a/b:1", 1.0)
    assert isinstance(found, LookupFailure)
    assert asked == ["registry.corp."]
    assert found.message == "registry 'registry.corp:5000' cannot be reached"


def test_a_redirect_to_plain_http_inside_the_cluster_is_not_followed(tmp_path: Path) -> None:
    """A tenant's HTTPS registry redirects to an internal plain-HTTP address: not asked, and
    nothing of it reaches the tenant's warning."""

    def internal(sock: socket.socket) -> None:
        body = json.dumps({"mediaType": "internal-secret-value"}).encode()
        answer(sock, "200 OK", {"Content-Length": str(len(body))}, body)

    with serving(internal) as inside:

        def redirect(sock: socket.socket) -> None:
            answer(
                sock, "302 Found", {"Location": f"http://{inside.host}/x", "Content-Length": "0"}
            )

        with serving(redirect, tmp_path) as tenant:
            client = RegistryClient(ca_file=str(tenant.ca_file), allowed=(tenant.host,))
            found = client.lookup(f"{tenant.host}/team/app:1", 2.0)
        assert inside.connections == []
    assert isinstance(found, LookupFailure)
    assert found.cause == "NotAllowed"
    assert "internal-secret" not in found.message
    assert inside.host not in found.message


def test_credentials_go_to_no_token_service_of_a_host_it_redirected_to(tmp_path: Path) -> None:
    seen: list[str] = []

    def token_service(sock: socket.socket) -> None:
        head = read_head(sock).decode("latin-1")
        seen.extend(line for line in head.split("\r\n") if line.lower().startswith("authorization"))
        body = b'{"token": "stolen"}'
        answer(sock, "200 OK", {"Content-Length": str(len(body))}, body)

    with serving(token_service) as tokens:

        def other(sock: socket.socket) -> None:
            challenge = f'Bearer realm="http://{tokens.host}/token",service="x"'
            answer(sock, "401 Unauthorized", {"WWW-Authenticate": challenge, "Content-Length": "0"})

        with serving(other) as elsewhere:

            def credentialed(sock: socket.socket) -> None:
                location = f"http://{elsewhere.host}/v2/x"
                headers = {"Location": location, "Content-Length": "0"}
                answer(sock, "307 Temporary Redirect", headers)

            with serving(credentialed) as home:
                insecure = frozenset({home.host, elsewhere.host, tokens.host})
                scoped = {home.host: Credential("user", "secret", namespaces=("team",))}
                client = RegistryClient(insecure=insecure, credentials=scoped)
                found = client.lookup(f"{home.host}/team/app:1", 2.0, namespace="team")
    assert isinstance(found, LookupFailure)
    assert seen == []


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}", "[::1]:{port}", "169.254.169.254", "10.96.0.1:443", "192.168.1.5:5000",
     "100.64.0.1", "[fe80::1]:5000", "0.0.0.0:{port}", "[::ffff:127.0.0.1]:{port}"],
)  # fmt: skip
def test_private_and_link_local_addresses_are_refused_without_a_connection(host: str) -> None:
    def never(sock: socket.socket) -> None:
        answer(sock, "200 OK", {"Content-Length": "2"}, b"{}")

    with serving(never) as target:
        port = target.host.rsplit(":", 1)[1]
        found = RegistryClient().lookup(f"{host.format(port=port)}/team/app:1", 1.0)
        assert target.connections == []
    assert isinstance(found, LookupFailure)
    assert found.cause == "NotAllowed", found


def test_a_name_that_resolves_to_a_private_address_is_refused() -> None:
    client = RegistryClient(resolve=lambda host, port: ["10.0.0.7"])
    found = client.lookup("registry.example.com/team/app:1", 1.0)
    assert isinstance(found, LookupFailure)
    assert found.cause == "NotAllowed"


def test_an_allow_list_keeps_every_other_registry_out() -> None:
    client = RegistryClient(allowed=("*.example.com",), resolve=lambda host, port: ["8.8.8.8"])
    found = client.lookup("registry.other.org/team/app:1", 1.0)
    assert isinstance(found, LookupFailure)
    assert found.cause == "NotAllowed"
    assert "--allowed-registries" in found.message


def test_the_tenant_cannot_tell_a_closed_port_from_http_or_another_ca(tmp_path: Path) -> None:
    def plain(sock: socket.socket) -> None:  # as an HTTP server answers a TLS hello
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    closed = socket.create_server(("127.0.0.1", 0))
    closed_host = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    with serving(plain) as http_only, serving(plain, tmp_path) as other_ca:
        hosts = (closed_host, http_only.host, other_ca.host)
        client = RegistryClient(allowed=hosts)
        messages = {h: client.lookup(f"{h}/team/app:1", 1.0) for h in hosts}
    said = {h: (f.cause, f.message.replace(h, "HOST")) for h, f in messages.items()}  # type: ignore[union-attr]
    assert len(set(said.values())) == 1, said
    assert next(iter(said.values())) == ("Unreachable", "registry 'HOST' cannot be reached")


@pytest.mark.parametrize(
    "reference",
    ["evil.example.com?x=/team/app:1", "evil.example.com#frag/team/app:1",
     "user@evil.example.com/team/app:1", "evil.example.com%2f/team/app:1",
     "evil.example.com:99999/team/app:1"],
)  # fmt: skip
def test_a_host_that_is_not_a_host_is_malformed(reference: str) -> None:
    asked: list[str] = []
    client = RegistryClient(resolve=lambda host, port: asked.append(host) or ["8.8.8.8"])  # type: ignore[func-returns-value]
    found = client.lookup(reference, 1.0)
    assert isinstance(found, LookupFailure)
    assert found.cause == "Malformed", found
    assert asked == []


@pytest.mark.parametrize(
    "head",
    [
        {"Content-Length": "abc"},
        {"Content-Length": "-1"},
        {"Content-Length": "5, 7"},
        {"WWW-Authenticate": 'Bearer realm="https://[::1",service="x"'},
    ],
)
def test_hostile_answers_are_refusals_not_exceptions(head: dict[str, str]) -> None:
    status = "401 Unauthorized" if "WWW-Authenticate" in head else "200 OK"

    def hostile(sock: socket.socket) -> None:
        answer(sock, status, head, b"{}")

    with serving(hostile) as server:
        found = RegistryClient(insecure=frozenset({server.host})).lookup(
            f"{server.host}/team/app:1", 1.0
        )
    assert isinstance(found, LookupFailure), found


def test_a_token_with_a_line_break_is_not_sent() -> None:
    def tokens(sock: socket.socket) -> None:
        body = json.dumps({"token": "abc\r\nX-Injected: 1"}).encode()
        answer(sock, "200 OK", {"Content-Length": str(len(body))}, body)

    with serving(tokens) as token_service:

        def registry(sock: socket.socket) -> None:
            challenge = f'Bearer realm="http://{token_service.host}/t",service="x"'
            answer(sock, "401 Unauthorized", {"WWW-Authenticate": challenge, "Content-Length": "0"})

        with serving(registry) as home:
            insecure = frozenset({home.host, token_service.host})
            found = RegistryClient(insecure=insecure).lookup(f"{home.host}/team/app:1", 1.0)
    assert isinstance(found, LookupFailure)
    assert found.cause == "Unauthorized"


def test_a_manifest_nested_deep_is_malformed() -> None:
    body = b"[" * 100_000 + b"]" * 100_000

    def deep(sock: socket.socket) -> None:
        answer(sock, "200 OK", {"Content-Length": str(len(body))}, body)

    with serving(deep) as server:
        found = RegistryClient(insecure=frozenset({server.host})).lookup(
            f"{server.host}/team/app:1", 2.0
        )
    assert isinstance(found, LookupFailure)
    assert found.cause == "Malformed"


def test_credentials_serve_only_the_namespaces_their_scope_names() -> None:
    secret = "s3cr3t-value"
    document = {"auths": {"registry.corp": {"username": "u", "password": secret},
                          "other.corp": {"username": "u", "password": secret}}}  # fmt: skip
    scopes = {"registry.corp": {"namespaces": ["team-a"], "repositories": ["team-a/*"]}}
    found, problems = scoped_credentials(document, scopes)
    assert set(found) == {"registry.corp"}
    assert problems == ["credentials for other.corp have no scope in scopes.json: not used"]
    client = RegistryClient(credentials=found)
    assert client.credential("registry.corp/team-a/app:1", "team-a") is not None
    assert client.credential("registry.corp/team-a/app:1", "team-b") is None
    assert client.credential("registry.corp/team-b/app:1", "team-a") is None
    assert client.credential("registry.corp/team-a/app:1", None) is None
    assert secret not in repr(found["registry.corp"])


def test_an_answer_read_with_credentials_never_answers_another_tenant() -> None:
    class Private:
        """A registry only team-a's credential can read."""

        credentials: ClassVar = {"registry.corp": Credential("u", "p", namespaces=("team-a",))}
        asked: ClassVar[list[str | None]] = []

        def credential(self, text: str, namespace: str | None) -> Credential | None:
            return RegistryClient(credentials=self.credentials).credential(text, namespace)

        def lookup(self, text: str, timeout: float, namespace: str | None = None) -> object:
            self.asked.append(namespace)
            if self.credential(text, namespace) is None:
                return LookupFailure("Unauthorized", "the registry refused access (HTTP 401)")
            return ImageFacts("registry.corp/team-a/app", "sha256:" + "a" * 64, False, ())

    resolver = Resolver(Private())  # type: ignore[arg-type]
    try:
        reference = "registry.corp/team-a/app:1"
        assert isinstance(resolver.resolve([reference], "team-a")[reference], ImageFacts)
        other = resolver.resolve([reference], "team-b")[reference]
        assert isinstance(other, LookupFailure)
        assert Private.asked == ["team-a", "team-b"]
    finally:
        resolver.shutdown()


def test_a_dry_run_never_waits_on_a_registry() -> None:
    class Slow:
        def lookup(self, text: str, timeout: float, namespace: str | None = None) -> object:
            time.sleep(timeout)
            return LookupFailure("Timeout", "slow")

    resolver = Resolver(Slow(), timeout=1.0)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        found = resolver.resolve(["registry.example.com/a/b:1"], "team", dry_run=True)
        assert time.monotonic() - started < 0.1
        failure = found["registry.example.com/a/b:1"]
        assert isinstance(failure, LookupFailure)
        assert failure.cause == "DryRun"
    finally:
        resolver.shutdown()


def test_a_flood_of_failing_references_evicts_only_its_own_namespaces_answers() -> None:
    class Fast:
        def lookup(self, text: str, timeout: float, namespace: str | None = None) -> object:
            if "victim" in text:
                return ImageFacts(text.split(":", maxsplit=1)[0], "sha256:" + "b" * 64, False, ())
            return LookupFailure("NotFound", "no such image")

    calls: list[str] = []
    client = Fast()
    original = client.lookup

    def counted(text: str, timeout: float, namespace: str | None = None) -> object:
        calls.append(text)
        return original(text, timeout, namespace)

    client.lookup = counted  # type: ignore[method-assign]
    resolver = Resolver(client)  # type: ignore[arg-type]
    try:
        victim = "registry.example.com/victim/app:1"
        resolver.resolve([victim], "team-b")
        for batch in range(512):  # 2048 references from one namespace, 4 a pod
            refs = [f"registry.example.com/flood/x{batch}-{n}:1" for n in range(4)]
            resolver.resolve(refs, "team-a")
        before = calls.count(victim)
        resolver.resolve([victim], "team-b")
        assert calls.count(victim) == before, "the victim's answer was evicted"
    finally:
        resolver.shutdown()
