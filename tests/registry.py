"""A real OCI registry on loopback for the tests: the CNCF distribution registry.

Built from the version pinned in tools/registry/go.mod into .cache/registry/bin/registry
(tools/registry/build.sh; `make test` and `make e2e` build it when Go is there). Each start
gets its own storage directory and a free port, over plain HTTP or over HTTPS with a CA
generated for that start (``Registry.ca_file``). Images are pushed through the OCI
distribution HTTP API (blob upload, manifest PUT) with the standard library: Windows image
manifests (``os: windows``, ``os.version``, amd64) with one tiny layer, and indexes over them.

    with running(tmp_path) as registry:
        old = registry.push_image("wcow/app", "10.0.17763.1234")
        new = registry.push_image("wcow/app", "10.0.20348.2655")
        index = registry.push_index("wcow/app", "multi", [old, new])
        registry.reference("wcow/app", index.digest)  # 127.0.0.1:PORT/wcow/app@sha256:...

Tests that need it call ``require_registry()`` first: it skips with the reason when the
binary is missing, and fails instead under ``WCOW_E2E_REQUIRED=1`` (``make e2e``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import signal
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from tests.built_tools import require_built
from tests.control_plane import LOOPBACK, _certificate, _key, _name, _pem_key, free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".cache" / "registry" / "bin" / "registry"
BUILD_SCRIPT = ROOT / "tools" / "registry" / "build.sh"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
# What a manifest of each kind points at (Windows images on MCR are Docker schema 2).
_CONFIG_AND_LAYER = {
    OCI_MANIFEST: (OCI_CONFIG, OCI_LAYER),
    DOCKER_MANIFEST: (DOCKER_CONFIG, DOCKER_LAYER),
}
_INDEX_FOR = {OCI_MANIFEST: OCI_INDEX, DOCKER_MANIFEST: DOCKER_LIST}


def require_registry() -> None:
    """Skip (or, under ``WCOW_E2E_REQUIRED=1``, fail) when the registry is not built."""
    require_built(BIN, "the test registry", BUILD_SCRIPT)


@dataclass(frozen=True)
class Pushed:
    """A manifest (or index) the registry now serves, as a descriptor would name it."""

    repository: str
    digest: str
    media_type: str
    size: int
    platform: dict[str, str] | None = None  # os, architecture, os.version (image manifests)
    config_digest: str | None = None  # image manifests: their config blob

    def descriptor(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.platform is not None:
            entry["platform"] = dict(self.platform)
        return entry


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def tiny_layer(text: str) -> tuple[bytes, str]:
    """A gzipped tar holding one small file, built the same way every time: (blob, diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        body = text.encode()
        info = tarfile.TarInfo("Files/wcow-test.txt")
        info.size, info.mtime, info.mode = len(body), 0, 0o644
        tar.addfile(info, io.BytesIO(body))
    uncompressed = raw.getvalue()
    return gzip.compress(uncompressed, mtime=0), _digest(uncompressed)


@dataclass
class Registry:
    """One registry process and its storage, all under ``workdir``."""

    workdir: Path
    tls: bool = False
    binary: Path = BIN
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    auth: dict[str, Any] | None = None  # the registry's `auth` configuration (e.g. silly)

    @property
    def host(self) -> str:
        """HOST:PORT, as an image reference and containerd's hosts configuration name it."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the serving certificate (HTTPS only)."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    def reference(self, repository: str, tag_or_digest: str) -> str:
        separator = "@" if tag_or_digest.startswith("sha256:") else ":"
        return f"{self.host}/{repository}{separator}{tag_or_digest}"

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 30) -> None:
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(
                f"registry binary missing at {self.binary}; build it with "
                f"{BUILD_SCRIPT.relative_to(ROOT)}"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.yml"
        config.write_text(yaml.safe_dump(self._config(), sort_keys=False))
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "serve", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _config(self) -> dict[str, Any]:
        http: dict[str, Any] = {"addr": self.host, "secret": "wcow-test-only"}
        if self.tls:
            http["tls"] = self._serving_certificate()
        extra = {"auth": self.auth} if self.auth else {}
        return {
            **extra,
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "data")},
                "delete": {"enabled": True},
            },
            "http": http,
        }

    def _serving_certificate(self) -> dict[str, str]:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca = _certificate(_name("wcow-test-registry-ca"), ca_key, None)
        key = _key()
        cert = _certificate(_name("wcow-test-registry"), key, (ca, ca_key), server=True)
        files = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "registry.crt": cert.public_bytes(serialization.Encoding.PEM),
            "registry.key": _pem_key(key),
        }
        for name, data in files.items():
            (pki / name).write_bytes(data)
            (pki / name).chmod(0o600)
        return {"certificate": str(pki / "registry.crt"), "key": str(pki / "registry.key")}

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"registry exited with {self.process.returncode}:\n{tail}")
            try:
                status, _, _ = self.request("GET", "/v2/")
                if status == 200 or (status == 401 and self.auth):
                    return
            except OSError as error:
                last = str(error)
            time.sleep(0.1)
        raise RuntimeError(f"registry not ready after {timeout:.0f} s ({last}); log: {self.log}")

    # --- the distribution HTTP API --------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One call to the registry (``path`` absolute, or a URL it returned): status,
        headers (lower-case names) and body; HTTP errors are returned, not raised."""
        url = path if path.startswith(("http://", "https://")) else self.url + path
        headers = dict(headers or {})
        if self.auth and path != "/v2/":  # silly auth lets any Authorization header through
            headers.setdefault("Authorization", "Bearer wcow-test-pusher")
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.tls else None
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, _lower(response.headers.items()), response.read()
        except urllib.error.HTTPError as error:
            return error.code, _lower(error.headers.items()), error.read()

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = _digest(data)
        status, headers, body = self.request("POST", f"/v2/{repository}/blobs/uploads/")
        _expect(status, 202, "start blob upload", body)
        location = urllib.parse.urljoin(self.url + "/", headers["location"])
        separator = "&" if "?" in location else "?"
        status, _, body = self.request(
            "PUT",
            f"{location}{separator}digest={urllib.parse.quote(digest)}",
            data,
            {"Content-Type": "application/octet-stream"},
        )
        _expect(status, 201, f"upload blob {digest}", body)
        return digest

    def push_manifest(
        self, repository: str, reference: str, document: dict[str, Any], media_type: str
    ) -> tuple[str, int]:
        """PUT a manifest or index under a tag or its own digest: (digest, size)."""
        body = _canonical(document)
        digest = _digest(body)
        status, headers, answer = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference or digest}",
            body,
            {"Content-Type": media_type},
        )
        _expect(status, 201, f"push manifest {repository}:{reference or digest}", answer)
        served = headers.get("docker-content-digest", digest)
        if served != digest:
            raise RuntimeError(f"registry stored {repository} as {served}, not {digest}")
        return digest, len(body)

    def push_image(
        self,
        repository: str,
        os_version: str,
        *,
        tag: str = "",
        media_type: str = OCI_MANIFEST,
        architecture: str = "amd64",
    ) -> Pushed:
        """A Windows image of ``os_version`` (``10.0.<build>.<revision>``): its config, one
        tiny layer and its manifest, tagged ``tag`` or pushed by digest only."""
        config_type, layer_type = _CONFIG_AND_LAYER[media_type]
        layer, diff_id = tiny_layer(f"wcow test image {repository} {os_version}\n")
        config = _canonical(
            {
                "architecture": architecture,
                "os": "windows",
                "os.version": os_version,
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                "config": {"Cmd": ["cmd", "/c", "echo", os_version]},
            }
        )
        config_digest = self.push_blob(repository, config)
        layer_digest = self.push_blob(repository, layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": len(layer)}],
        }
        digest, size = self.push_manifest(repository, tag, manifest, media_type)
        platform = {"architecture": architecture, "os": "windows", "os.version": os_version}
        return Pushed(repository, digest, media_type, size, platform, config_digest)

    def push_index(
        self,
        repository: str,
        tag: str,
        manifests: list[Pushed],
        *,
        media_type: str | None = None,
        with_platforms: bool = True,
    ) -> Pushed:
        """An index (OCI) or manifest list (Docker) over pushed manifests, in the order
        given; ``with_platforms=False`` leaves the entries' platform out, so a client must
        read each config to learn it."""
        media_type = media_type or _INDEX_FOR[manifests[0].media_type]
        entries = [m.descriptor() for m in manifests]
        if not with_platforms:
            for entry in entries:
                entry.pop("platform", None)
        document = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
        digest, size = self.push_manifest(repository, tag, document, media_type)
        return Pushed(repository, digest, media_type, size)

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]]:
        """GET a manifest or index: (media type, document)."""
        accept = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
        status, headers, body = self.request(
            "GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": accept}
        )
        _expect(status, 200, f"get manifest {repository}:{reference}", body)
        document: dict[str, Any] = json.loads(body)
        return headers.get("content-type", ""), document


def _lower(items: Any) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in items}


def _expect(status: int, wanted: int, what: str, body: bytes) -> None:
    if status != wanted:
        raise RuntimeError(f"registry: {what}: HTTP {status}: {body[:300]!r}")


@contextlib.contextmanager
def running(
    workdir: Path, *, tls: bool = False, auth: dict[str, Any] | None = None
) -> Iterator[Registry]:
    registry = Registry(workdir, tls=tls, auth=auth)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()
