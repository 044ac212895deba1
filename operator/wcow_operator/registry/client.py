"""Reading an image reference from its registry: the OCI distribution API over urllib3.

The registry is an untrusted input (docs/security.md): every answer is bounded in size
(``MAX_MANIFEST_BYTES``, as containerd bounds manifests), in time (one deadline for the
whole lookup, token and config blob included; each socket read is bounded by what is left),
in entries (``MAX_ENTRIES``), and checked against its digest; anything else is a
``LookupFailure`` with a sentence, never an exception. HTTPS with the system's CAs (or
``ca_file``); plain HTTP only for the hosts given as insecure. Credentials (from a
dockerconfigjson Secret) are sent only to the registry they are for, and to its token
service over HTTPS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlencode

import urllib3

from wcow_contract.text import shown
from wcow_operator.registry.facts import (
    Entry,
    Facts,
    ImageFacts,
    LookupFailure,
    Platform,
    repository_of,
)

# containerd's resolver rejects a manifest above MaxManifestSize = 4 * 1048 * 1048 bytes
# (sic: 4,393,216) when it resolves a reference (remotes/docker/resolver.go, v1.7.35; v2.0.14,
# v2.2.9 and v2.4.2 core/remotes/docker/resolver.go); the distribution registry refuses to
# store one above 4 MiB (registry/handlers/manifests.go maxManifestBodySize, v3.1.1). The
# same bound as containerd: what a node would pull is read, what it would reject is refused
# here too. A config blob gets the same cap.
MAX_MANIFEST_BYTES: Final = 4 * 1048 * 1048
MAX_ENTRIES: Final = 256  # index entries read (Windows indexes have a handful)
MAX_TOKEN_BYTES: Final = 64 << 10
CHUNK: Final = 64 << 10
# Registries send blob reads to storage (a CDN, S3) by redirect: follow up to three; never
# retry (the deadline is the pod's); Authorization is dropped when the host changes (urllib3's
# remove_headers_on_redirect default: Authorization, Cookie, Proxy-Authorization).
REDIRECTS: Final = urllib3.Retry(total=3, connect=0, read=0, other=0, status=0, redirect=3)
INDEX_TYPES: Final = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES: Final = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT: Final = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
DOCKER_HUB: Final = "registry-1.docker.io"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_CHALLENGE = re.compile(r'([a-z]+)="([^"]*)"')


class Failed(Exception):  # noqa: N818 - turned into a LookupFailure by lookup()
    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


@dataclass(frozen=True)
class Reference:
    """A parsed image reference, normalized as containerd and Docker do (docker.io,
    library/ for one-component names)."""

    host: str  # the API host: registry-1.docker.io for docker.io
    path: str
    tag: str | None
    digest: str | None
    repository: str  # as written, without tag or digest (the pin keeps the user's spelling)

    @property
    def target(self) -> str:
        return self.digest or self.tag or "latest"


def parse_reference(text: str) -> Reference:
    name, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise Failed("Malformed", f"the digest {shown(digest)} is not sha256:<64 hex>")
    repository = repository_of(text)
    tag = name[len(repository) + 1 :] or None
    if tag is not None and not _TAG.fullmatch(tag):
        raise Failed("Malformed", f"the tag {shown(tag)} is not a valid tag")
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", repository
    if host in ("docker.io", "index.docker.io"):
        host = DOCKER_HUB
        path = path if "/" in path else f"library/{path}"
    if not _NAME.fullmatch(path):
        raise Failed("Malformed", f"{shown(repository)} is not a valid repository name")
    return Reference(host, path, tag, digest or None, repository)


def credentials_from_dockerconfig(document: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """(user, password) by registry host from a ``.dockerconfigjson`` document; entries of
    other shapes are skipped (the Secret's author is told by the operator's log, not here)."""
    found: dict[str, tuple[str, str]] = {}
    auths = document.get("auths")
    for key, entry in (auths if isinstance(auths, dict) else {}).items():
        if not isinstance(key, str) or not isinstance(entry, dict):
            continue
        host = re.sub(r"^https?://", "", key).split("/", 1)[0]
        host = DOCKER_HUB if host in ("docker.io", "index.docker.io") else host
        user, password = entry.get("username"), entry.get("password")
        if isinstance(entry.get("auth"), str):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
        if isinstance(user, str) and isinstance(password, str):
            found[host] = (user, password)
    return found


@dataclass
class RegistryClient:
    """One client for all registries (a small connection pool per host)."""

    insecure: frozenset[str] = frozenset()  # HOST:PORT read over plain HTTP
    credentials: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    ca_file: str | None = None
    max_manifest_bytes: int = MAX_MANIFEST_BYTES

    def __post_init__(self) -> None:
        self._pool = urllib3.PoolManager(
            num_pools=32, maxsize=4, retries=False, ca_certs=self.ca_file
        )

    def lookup(self, text: str, timeout: float) -> Facts:
        """The facts of reference ``text``, or why there are none, within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        try:
            reference = parse_reference(text)
            return _Lookup(self, reference, deadline).facts()
        except Failed as failure:
            return LookupFailure(failure.cause, failure.message)

    def scheme(self, host: str) -> str:
        return "http" if host in self.insecure else "https"

    def get(
        self, url: str, headers: Mapping[str, str], deadline: float, limit: int
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One GET within the deadline: status, headers, at most ``limit`` bytes of body."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failed("Timeout", "no answer within the lookup's deadline")
        try:
            response = self._pool.request(
                "GET", url, headers=dict(headers), preload_content=False, retries=REDIRECTS,
                timeout=urllib3.Timeout(connect=left, read=left),
            )  # fmt: skip
        except urllib3.exceptions.MaxRetryError as error:
            raise _transport(error.reason or error, url) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise _transport(error, url) from None
        try:
            return response.status, response.headers, _read(response, deadline, limit)
        finally:
            response.release_conn()


def _transport(error: BaseException, url: str) -> Failed:
    host = urllib3.util.parse_url(url).netloc or "?"
    refused = isinstance(error, urllib3.exceptions.NewConnectionError)  # a ConnectTimeoutError
    if not refused and isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
        return Failed("Timeout", f"registry {shown(host)} did not answer in time")
    if isinstance(error, urllib3.exceptions.SSLError):
        return Failed("Unreachable", f"TLS with registry {shown(host)} failed: {shown(str(error))}")
    return Failed("Unreachable", f"registry {shown(host)} cannot be reached: {shown(str(error))}")


def _read(response: Any, deadline: float, limit: int) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise Failed("TooLarge", f"the registry announced {declared} bytes, above {limit}")
    body = bytearray()
    read = response.read1  # what has arrived, at once: the deadline is checked between reads
    try:
        while chunk := read(CHUNK):
            body += chunk
            if len(body) > limit:
                raise Failed("TooLarge", f"the registry sent more than {limit} bytes")
            if time.monotonic() > deadline:
                raise Failed("Timeout", "the registry's answer did not arrive in time")
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise Failed("Timeout" if "timed out" in str(error) else "Unreachable",
                     f"the registry's answer broke off: {shown(str(error))}") from None  # fmt: skip
    return bytes(body)


def _status_failure(status: int, what: str) -> Failed:
    if status in (401, 403):
        return Failed("Unauthorized", f"the registry refused access to {what} (HTTP {status})")
    if status == 404:
        return Failed("NotFound", f"the registry has no {what} (HTTP 404)")
    if status >= 500 or status == 429:
        return Failed("ServerError", f"the registry failed on {what} (HTTP {status})")
    return Failed("ServerError", f"the registry answered HTTP {status} for {what}")


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Failed("Malformed", f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise Failed("Malformed", f"{what} is not a JSON object")
    return document


def _platform(value: Any, what: str) -> Platform | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Failed("Malformed", f"{what} has a platform that is not an object")
    fields = (value.get("os"), value.get("architecture"), value.get("os.version", ""))
    if not all(isinstance(f, str) and len(f) <= 64 for f in fields):
        raise Failed("Malformed", f"{what} has a platform that is not os/architecture strings")
    return Platform(*(str(f) for f in fields))


def _entries(document: dict[str, Any], what: str) -> tuple[Entry, ...]:
    manifests = document.get("manifests")
    if not isinstance(manifests, list):
        raise Failed("Malformed", f"{what} is an index without a manifests list")
    if len(manifests) > MAX_ENTRIES:
        raise Failed("TooLarge", f"{what} lists {len(manifests)} manifests, above {MAX_ENTRIES}")
    entries = []
    for position, item in enumerate(manifests):
        where = f"{what}, entry {position}"
        if not isinstance(item, dict) or not _DIGEST.fullmatch(str(item.get("digest"))):
            raise Failed("Malformed", f"{where} has no sha256 digest")
        if item.get("mediaType") in INDEX_TYPES:
            continue  # a nested index: containerd's CRI pull does not descend into it either
        entries.append(Entry(item["digest"], _platform(item.get("platform"), where)))
    return tuple(entries)


class _Lookup:
    """One reference: manifest or index, then the config of a single manifest."""

    def __init__(self, client: RegistryClient, reference: Reference, deadline: float) -> None:
        self.client, self.reference, self.deadline = client, reference, deadline
        self.authorization: str | None = None

    def facts(self) -> ImageFacts:
        ref = self.reference
        body, media_type = self._fetch("manifests", ref.target, ACCEPT, "the manifest")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if ref.digest and digest != ref.digest:
            raise Failed("Malformed", f"the manifest served for {ref.digest} has digest {digest}")
        what = f"manifest {digest[:19]}"
        document = _json(body, what)
        media_type = str(document.get("mediaType") or media_type).split(";", 1)[0].strip()
        if media_type in INDEX_TYPES or "manifests" in document:
            return ImageFacts(ref.repository, digest, True, _entries(document, what))
        if media_type not in MANIFEST_TYPES:
            raise Failed("Malformed", f"{what} is of type {shown(media_type)}, not an image")
        return ImageFacts(ref.repository, digest, False, (Entry(digest, self._config(document)),))

    def _config(self, manifest: dict[str, Any]) -> Platform:
        config = manifest.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise Failed("Malformed", "the manifest has no config digest")
        body, _ = self._fetch("blobs", digest, "*/*", "the image config")
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise Failed("Malformed", f"the config served for {digest} has another digest")
        platform = _platform(_json(body, "the image config"), "the image config")
        assert platform is not None
        return platform

    def _fetch(self, kind: str, target: str, accept: str, what: str) -> tuple[bytes, str]:
        client, ref = self.client, self.reference
        url = f"{client.scheme(ref.host)}://{ref.host}/v2/{ref.path}/{kind}/{target}"
        limit = client.max_manifest_bytes
        for attempt in range(2):
            headers = {"Accept": accept}
            if self.authorization:
                headers["Authorization"] = self.authorization
            status, answer, body = client.get(url, headers, self.deadline, limit)
            if status == 401 and attempt == 0 and self._authorize(answer):
                continue
            if status != 200:
                raise _status_failure(status, f"{what} of {shown(ref.repository)}:{shown(target)}")
            return body, str(answer.get("Content-Type", ""))
        raise _status_failure(401, what)

    def _authorize(self, answer: Mapping[str, str]) -> bool:
        """Answer a 401's challenge: Basic with the host's credentials, or a Bearer token
        from the realm (over HTTPS, or HTTP only to an insecure host). False: nothing to try."""
        challenge = str(answer.get("WWW-Authenticate", ""))
        scheme, _, params = challenge.partition(" ")
        basic = self.client.credentials.get(self.reference.host)
        encoded = "Basic " + base64.b64encode(":".join(basic).encode()).decode() if basic else ""
        if scheme.lower() == "basic" and basic:
            self.authorization = encoded
            return True
        if scheme.lower() != "bearer":
            return False
        values = dict(_CHALLENGE.findall(params))
        realm = urllib3.util.parse_url(values.get("realm", ""))
        if not (
            realm.scheme == "https"
            or (realm.scheme == "http" and realm.netloc in self.client.insecure)
        ):
            raise Failed("Unauthorized", f"the token service {shown(str(realm))} is not HTTPS")
        query = {"service": values.get("service", ""), "scope": values.get("scope", "")}
        url = str(realm) + "?" + urlencode({k: v for k, v in query.items() if v})
        headers = {"Authorization": encoded} if basic else {}
        status, _, body = self.client.get(url, headers, self.deadline, MAX_TOKEN_BYTES)
        if status != 200:
            raise _status_failure(status, "a token")
        document = _json(body, "the token answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str):
            raise Failed("Unauthorized", "the token service answered without a token")
        self.authorization = f"Bearer {token}"
        return True
