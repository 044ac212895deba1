"""The test registry (tests/registry.py) the image checks stand on: the real distribution
registry on loopback, over plain HTTP and over HTTPS with the CA generated for it, serving
what the tests push back byte for byte. Under `make e2e` a registry that was not built fails
these tests instead of skipping them."""

from __future__ import annotations

import hashlib
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.registry import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    require_registry,
    running,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _registry_built() -> None:
    require_registry()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_pushed_windows_images_are_served_as_pushed(tmp_path: Path, tls: bool) -> None:
    with running(tmp_path, tls=tls) as registry:
        assert registry.url.startswith("https://" if tls else "http://")
        old = registry.push_image("wcow/app", "10.0.17763.1234", tag="ltsc2019")
        new = registry.push_image("wcow/app", "10.0.20348.2655")
        index = registry.push_index("wcow/app", "multi", [old, new])

        media_type, document = registry.manifest("wcow/app", "multi")
        assert media_type == OCI_INDEX
        assert [entry["digest"] for entry in document["manifests"]] == [old.digest, new.digest]
        assert [entry["platform"]["os.version"] for entry in document["manifests"]] == [
            "10.0.17763.1234",
            "10.0.20348.2655",
        ]
        # By digest, the bytes are the ones whose digest the reference names.
        status, headers, body = registry.request(
            "GET", f"/v2/wcow/app/manifests/{index.digest}", headers={"Accept": OCI_INDEX}
        )
        assert status == 200
        assert "sha256:" + hashlib.sha256(body).hexdigest() == index.digest
        assert headers["docker-content-digest"] == index.digest
        # The tag of one manifest serves that manifest, and its config says the build.
        media_type, manifest = registry.manifest("wcow/app", "ltsc2019")
        assert media_type == OCI_MANIFEST
        status, _, config = registry.request(
            "GET", f"/v2/wcow/app/blobs/{manifest['config']['digest']}"
        )
        assert status == 200
        assert json.loads(config)["os.version"] == "10.0.17763.1234"
        assert registry.reference("wcow/app", index.digest) == (
            f"127.0.0.1:{registry.port}/wcow/app@{index.digest}"
        )


def test_docker_manifest_lists_as_windows_images_on_mcr_come(tmp_path: Path) -> None:
    with running(tmp_path) as registry:
        image = registry.push_image("wcow/nano", "10.0.26100.1742", media_type=DOCKER_MANIFEST)
        registry.push_index("wcow/nano", "ltsc2025", [image])
        media_type, document = registry.manifest("wcow/nano", "ltsc2025")
        assert media_type == DOCKER_LIST
        assert document["manifests"][0]["mediaType"] == DOCKER_MANIFEST


def test_https_is_verified_against_the_generated_ca(tmp_path: Path) -> None:
    """The serving certificate is real TLS: a client that does not trust the CA is refused,
    and plain HTTP to the HTTPS port gets no registry answer."""
    with running(tmp_path, tls=True) as registry:
        untrusting = ssl.create_default_context()
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"{registry.url}/v2/", timeout=10, context=untrusting)
        status, _, _ = registry.request("GET", f"http://{registry.host}/v2/")
        assert status == 400


def test_stop_ends_the_process_and_frees_the_port(tmp_path: Path) -> None:
    with running(tmp_path) as registry:
        process = registry.process
        assert process is not None
    assert process.poll() is not None
    with pytest.raises(OSError):  # noqa: PT011 - refused, reset: any socket error
        registry.request("GET", "/v2/")
