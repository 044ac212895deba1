"""Reading an image reference from its registry: the OCI distribution API.

The registry is an untrusted input (docs/security.md): every answer is bounded in size
(``MAX_MANIFEST_BYTES``, as containerd bounds manifests), in time (one deadline for the
whole lookup, token and config blob included, which ends whatever the peer does:
``transport``), in entries (``MAX_ENTRIES``) and depth, and checked against its digest;
anything else is a ``LookupFailure`` with a sentence, never an exception. Which hosts may be
read, over what and at which addresses is the ``policy``'s; credentials are used only for
the namespaces and repositories their scope names (``credentials``), and sent only to the
registry they are for and to the token service its own 401 names, over HTTPS.
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
from urllib.parse import urlencode, urlsplit

from wcow_contract.text import shown
from wcow_operator.registry.credentials import DOCKER_HUB, Credential
from wcow_operator.registry.facts import (
    Entry,
    Facts,
    ImageFacts,
    LookupFailure,
    Platform,
    repository_of,
)
from wcow_operator.registry.policy import (
    HostPort,
    PolicyRefusal,
    RegistryPolicy,
    parse_hostport,
)
from wcow_operator.registry.transport import Answer, Failed, Resolve, Transport

# containerd's resolver rejects a manifest above MaxManifestSize = 4 * 1048 * 1048 bytes
# (sic: 4,393,216) when it resolves a reference (remotes/docker/resolver.go, v1.7.35; v2.0.14,
# v2.2.9 and v2.4.2 core/remotes/docker/resolver.go); the distribution registry refuses to
# store one above 4 MiB (registry/handlers/manifests.go maxManifestBodySize, v3.1.1). The
# same bound as containerd: what a node would pull is read, what it would reject is refused
# here too. A config blob gets the same cap.
MAX_MANIFEST_BYTES: Final = 4 * 1048 * 1048
MAX_ENTRIES: Final = 256  # index entries read (Windows indexes have a handful)
MAX_TOKEN_BYTES: Final = 64 << 10
INDEX_TYPES: Final = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES: Final = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT: Final = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_CHALLENGE = re.compile(r'([a-z]+)="([^"]*)"')
# RFC 6750 b64token: a token with anything else (CR, LF, spaces) is not sent anywhere.
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{1,8192}")


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

    @property
    def where(self) -> HostPort:
        return parse_hostport(self.host)


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
    try:
        where = parse_hostport(host)
    except PolicyRefusal as refusal:
        raise Failed(refusal.cause, refusal.message) from None
    return Reference(where.text(), path, tag, digest or None, repository)


@dataclass
class RegistryClient:
    """One client for all registries: each lookup under one deadline, on connections of
    its own (``transport``)."""

    insecure: frozenset[str] = frozenset()  # HOST:PORT read over plain HTTP
    credentials: Mapping[str, Credential] = field(default_factory=dict)
    ca_file: str | None = None
    max_manifest_bytes: int = MAX_MANIFEST_BYTES
    allowed: tuple[str, ...] = ()  # host[:port] globs the checks may read (empty: public ones)
    resolve: Resolve | None = None  # name resolution (tests): absolute names by default

    @property
    def transport(self) -> Transport:
        return Transport(RegistryPolicy(self.allowed, self.insecure), self.ca_file, self.resolve)

    def credential(self, text: str, namespace: str | None) -> Credential | None:
        """The credential a pod of ``namespace`` may read reference ``text`` with."""
        try:
            reference = parse_reference(text)
        except Failed:
            return None
        found = self.credentials.get(reference.host)
        return found if found is not None and found.allows(namespace, reference.path) else None

    def lookup(self, text: str, timeout: float, namespace: str | None = None) -> Facts:
        """The facts of reference ``text``, or why there are none, within ``timeout`` s, with
        the credentials a pod of ``namespace`` may use (None: anonymous)."""
        deadline = time.monotonic() + timeout
        try:
            reference = parse_reference(text)
            credential = self.credential(text, namespace)
            return _Lookup(self.transport, reference, deadline, credential, self).facts()
        except (Failed, PolicyRefusal) as failure:
            return LookupFailure(failure.cause, failure.message)
        except RecursionError:
            return LookupFailure("Malformed", "the registry's answer is nested too deep")


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

    def __init__(
        self,
        transport: Transport,
        reference: Reference,
        deadline: float,
        credential: Credential | None,
        client: RegistryClient,
    ) -> None:
        self.transport, self.reference, self.deadline = transport, reference, deadline
        self.credential, self.client = credential, client
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
            raise Failed("Malformed", f"{what} is of type {shown(media_type, 80)}, not an image")
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
        ref = self.reference
        url = self.transport.target(ref.where, f"/v2/{ref.path}/{kind}/{target}")
        limit = self.client.max_manifest_bytes
        for attempt in range(2):
            sent = (ref.where, self.authorization) if self.authorization else None
            answer = self.transport.get(
                url, {"Accept": accept}, self.deadline, limit, authorization=sent
            )
            # Only the registry's own 401 is answered: a host it redirected to gets nothing.
            own = answer.where == ref.where
            if answer.status == 401 and attempt == 0 and own and self._authorize(answer):
                continue
            if answer.status != 200:
                raise _status_failure(
                    answer.status, f"{what} of {shown(ref.repository, 200)}:{shown(target, 80)}"
                )
            return answer.body, str(answer.headers.get("content-type", ""))
        raise _status_failure(401, what)

    def _basic(self) -> str | None:
        if self.credential is None:
            return None
        pair = f"{self.credential.user}:{self.credential.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def _authorize(self, answer: Answer) -> bool:
        """Answer the registry's 401: Basic with the credential its scope allows, or a
        Bearer token from the realm it names (held to the policy like any host; HTTPS, or
        HTTP only to an insecure host). False: nothing to try."""
        challenge = str(answer.headers.get("www-authenticate", ""))[:4096]
        scheme, _, params = challenge.partition(" ")
        basic = self._basic()
        if scheme.lower() == "basic" and basic:
            self.authorization = basic
            return True
        if scheme.lower() != "bearer":
            return False
        values = dict(_CHALLENGE.findall(params))
        token = self._token(values, basic)
        self.authorization = f"Bearer {token}"
        return True

    def _token(self, values: Mapping[str, str], basic: str | None) -> str:
        try:
            realm = urlsplit(values.get("realm", "")[:2048])
            where = parse_hostport(realm.netloc)
        except (ValueError, PolicyRefusal):
            raise Failed(
                "Unauthorized", "the registry names a token service that is not a URL"
            ) from None
        insecure = self.transport.policy.scheme(where) == "http"
        if not (realm.scheme == "https" or (realm.scheme == "http" and insecure)):
            raise Failed(
                "Unauthorized", f"the token service {shown(where.text(), 80)} is not HTTPS"
            )
        query = {"service": values.get("service", ""), "scope": values.get("scope", "")}
        path = (realm.path or "/") + "?" + urlencode({k: v for k, v in query.items() if v})
        url = self.transport.target(where, path)
        if realm.scheme != url.scheme:
            raise Failed(
                "Unauthorized", f"the token service {shown(where.text(), 80)} is not HTTPS"
            )
        sent = (where, basic) if basic else None
        answer = self.transport.get(url, {}, self.deadline, MAX_TOKEN_BYTES, authorization=sent)
        if answer.status != 200:
            raise _status_failure(answer.status, "a token")
        document = _json(answer.body, "the token answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise Failed("Unauthorized", "the token service answered without a usable token")
        return token
