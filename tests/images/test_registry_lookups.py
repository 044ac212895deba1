"""The registry client against the real registry (tests/registry.py): what it reads, and
each way a registry can fail it (401, 404, 500, slow, down, too large, malformed), each in
bounded time with a sentence and no exception."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane import free_port
from tests.registry import DOCKER_MANIFEST, Registry, require_registry, running
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.credentials import Credential
from wcow_operator.registry.facts import ImageFacts, LookupFailure
from wcow_operator.registry.resolver import FactsCache, Resolver

WS2019, WS2022 = "10.0.17763.1234", "10.0.20348.2655"


@pytest.fixture(autouse=True)
def _registry_built() -> None:
    require_registry()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with running(tmp_path) as started:
        yield started


def _client(registry: Registry, **kwargs: object) -> RegistryClient:
    return RegistryClient(insecure=frozenset({registry.host}), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("media_type", ["application/vnd.oci.image.manifest.v1+json",
                                        DOCKER_MANIFEST])  # fmt: skip
def test_an_index_gives_its_entries_and_a_manifest_its_configs_build(
    registry: Registry, media_type: str
) -> None:
    old = registry.push_image("wcow/app", WS2019, tag="ltsc2019", media_type=media_type)
    new = registry.push_image("wcow/app", WS2022, media_type=media_type)
    index = registry.push_index("wcow/app", "multi", [old, new])
    client = _client(registry)

    facts = client.lookup(registry.reference("wcow/app", "multi"), 2.0)
    assert isinstance(facts, ImageFacts)
    assert facts.index
    assert facts.digest == index.digest
    assert [(e.digest, e.platform and e.platform.build) for e in facts.entries] == [
        (old.digest, 17763),
        (new.digest, 20348),
    ]
    one = client.lookup(registry.reference("wcow/app", "ltsc2019"), 2.0)
    assert isinstance(one, ImageFacts)
    assert not one.index
    assert one.digest == old.digest
    assert one.entries[0].platform is not None
    assert one.entries[0].platform.build == 17763
    assert one.repository == f"{registry.host}/wcow/app"


def test_https_is_the_default_and_plain_http_only_for_insecure_hosts(tmp_path: Path) -> None:
    with running(tmp_path, tls=True) as registry:
        registry.push_image("wcow/app", WS2022, tag="ltsc2022")
        reference = registry.reference("wcow/app", "ltsc2022")
        listed = (registry.host,)  # a loopback address: read only when listed by name
        trusted = RegistryClient(ca_file=str(registry.ca_file), allowed=listed)
        assert isinstance(trusted.lookup(reference, 2.0), ImageFacts)
        untrusted = RegistryClient(allowed=listed).lookup(reference, 2.0)
        assert isinstance(untrusted, LookupFailure)
        assert untrusted.cause == "Unreachable"
        # The tenant is not told how (another CA reads as a closed port would).
        assert untrusted.message == f"registry {registry.host!r} cannot be reached"
    with running(tmp_path / "plain") as plain:
        plain.push_image("wcow/app", WS2022, tag="ltsc2022")
        failure = RegistryClient(allowed=(plain.host,)).lookup(
            plain.reference("wcow/app", "ltsc2022"), 2.0
        )
        assert isinstance(failure, LookupFailure)
        assert failure.cause == "Unreachable"


def test_404_for_a_missing_tag(registry: Registry) -> None:
    registry.push_image("wcow/app", WS2022, tag="ltsc2022")
    failure = _client(registry).lookup(registry.reference("wcow/app", "nope"), 2.0)
    assert isinstance(failure, LookupFailure)
    assert failure.cause == "NotFound"
    assert "HTTP 404" in failure.message
    assert "nope" in failure.message


class _TokenService(http.server.BaseHTTPRequestHandler):
    expected = ""
    seen: list[str] = []  # noqa: RUF012 - one test at a time

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization", ""))
        ok = self.headers.get("Authorization") == self.expected
        body = json.dumps({"token": "granted"}).encode() if ok else b"{}"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def token_service() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _TokenService)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_401_without_credentials_and_a_token_with_them(tmp_path: Path, token_service: str) -> None:
    realm = f"http://{token_service}/token"
    auth = {"silly": {"realm": realm, "service": "wcow-test"}}
    with running(tmp_path, auth=auth) as registry:
        registry.push_image("wcow/app", WS2022, tag="ltsc2022")
        reference = registry.reference("wcow/app", "ltsc2022")
        _TokenService.expected = "Basic dXNlcjpzZWNyZXQ="  # user:secret
        # A token service over plain HTTP is refused unless its host is listed as insecure.
        scoped = {registry.host: Credential("user", "secret", namespaces=("team-a",))}
        refused = _client(registry, credentials=scoped)
        failure = refused.lookup(reference, 2.0, namespace="team-a")
        assert isinstance(failure, LookupFailure)
        assert failure.cause == "Unauthorized"
        assert "not HTTPS" in failure.message

        insecure = frozenset({registry.host, token_service})
        anonymous = RegistryClient(insecure=insecure).lookup(reference, 2.0)
        assert isinstance(anonymous, LookupFailure)
        assert anonymous.cause == "Unauthorized"
        assert "HTTP 401" in anonymous.message

        client = RegistryClient(insecure=insecure, credentials=scoped)
        facts = client.lookup(reference, 2.0, namespace="team-a")
        assert isinstance(facts, ImageFacts)
        assert facts.entries[0].platform is not None
        assert _TokenService.seen[-1] == "Basic dXNlcjpzZWNyZXQ="


class _Faulty(http.server.BaseHTTPRequestHandler):
    """In front of the real registry: answers 500, or forwards after a delay."""

    upstream = ""
    mode = "500"

    def do_GET(self) -> None:
        if self.mode == "redirect":  # as a registry sends blob reads to its storage
            self.send_response(307)
            self.send_header("Location", self.upstream + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.mode == "500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        time.sleep(3)
        request = urllib.request.Request(self.upstream + self.path, headers=dict(self.headers))
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                body = answer.read()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize("mode", ["500", "slow"])
def test_a_failing_or_slow_registry_costs_at_most_the_deadline(
    registry: Registry, mode: str
) -> None:
    registry.push_image("wcow/app", WS2022, tag="ltsc2022")
    _Faulty.upstream, _Faulty.mode = registry.url, mode
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Faulty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        resolver = Resolver(RegistryClient(insecure=frozenset({host})), timeout=0.5)
        started = time.monotonic()
        found = resolver.resolve([f"{host}/wcow/app:ltsc2022"])
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
        resolver.shutdown()
    failure = found[f"{host}/wcow/app:ltsc2022"]
    assert isinstance(failure, LookupFailure)
    assert took < 1.0
    if mode == "500":
        assert failure.cause == "ServerError"
        assert "HTTP 500" in failure.message
    else:
        assert failure.cause == "Timeout"


def test_redirects_are_followed_to_the_bytes_the_digest_names(registry: Registry) -> None:
    registry.push_image("wcow/app", WS2022, tag="ltsc2022")
    _Faulty.upstream, _Faulty.mode = registry.url, "redirect"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Faulty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        # Each hop is held to the same rules: the storage it redirects to is listed too.
        client = RegistryClient(insecure=frozenset({host, registry.host}))
        facts = client.lookup(f"{host}/wcow/app:ltsc2022", 2.0)
    finally:
        server.shutdown()
        server.server_close()
    assert isinstance(facts, ImageFacts)
    assert facts.entries[0].platform is not None
    assert facts.entries[0].platform.build == 20348


def test_a_registry_that_is_down_fails_at_once_and_is_not_asked_again() -> None:
    host = f"127.0.0.1:{free_port()}"
    resolver = Resolver(RegistryClient(insecure=frozenset({host})), cache=FactsCache())
    try:
        started = time.monotonic()
        first = resolver.resolve([f"{host}/wcow/app:ltsc2022"])[f"{host}/wcow/app:ltsc2022"]
        assert time.monotonic() - started < 0.5
        assert isinstance(first, LookupFailure)
        assert first.cause == "Unreachable"
        assert "cannot be reached" in first.message
        key = resolver.key(f"{host}/wcow/app:ltsc2022", None)
        assert resolver.cache.get(key) == first  # for FAILURE_TTL
    finally:
        resolver.shutdown()


def test_a_manifest_above_the_cap_is_not_read(registry: Registry) -> None:
    images = [registry.push_image("wcow/big", f"10.0.20348.{n}") for n in range(40)]
    registry.push_index("wcow/big", "huge", images)  # about 8 KiB
    failure = _client(registry, max_manifest_bytes=4096).lookup(
        registry.reference("wcow/big", "huge"), 2.0
    )
    assert isinstance(failure, LookupFailure)
    assert failure.cause == "TooLarge"
    assert "4096" in failure.message


def test_a_malformed_config_or_os_version_is_named(registry: Registry) -> None:
    config = registry.push_blob("wcow/bad", b"not json at all")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config,
            "size": 15,
        },
        "layers": [],
    }
    registry.push_manifest("wcow/bad", "broken", manifest, manifest["mediaType"])  # type: ignore[arg-type]
    failure = _client(registry).lookup(registry.reference("wcow/bad", "broken"), 2.0)
    assert isinstance(failure, LookupFailure)
    assert failure.cause == "Malformed"
    assert "image config is not JSON" in failure.message
    bad_digest = _client(registry).lookup("wcow/app@sha256:zz", 2.0)
    assert isinstance(bad_digest, LookupFailure)
    assert bad_digest.cause == "Malformed"


def test_the_cache_answers_a_pinned_entry_without_asking(registry: Registry) -> None:
    old = registry.push_image("wcow/app", WS2019)
    new = registry.push_image("wcow/app", WS2022)
    registry.push_index("wcow/app", "multi", [old, new])
    resolver = Resolver(_client(registry))
    try:
        resolver.resolve([registry.reference("wcow/app", "multi")])
        pinned = resolver.cache.get(resolver.key(registry.reference("wcow/app", old.digest), None))
        assert isinstance(pinned, ImageFacts)
        assert not pinned.index
        assert pinned.entries[0].digest == old.digest
    finally:
        resolver.shutdown()
