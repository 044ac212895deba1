"""Image references as containerd and Docker normalize them (what the client asks for)."""

from __future__ import annotations

import pytest

from wcow_operator.registry.client import Failed, parse_reference

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "host", "path", "target", "repository"),
    [
        ("nanoserver", "registry-1.docker.io", "library/nanoserver", "latest", "nanoserver"),
        ("docker.io/team/app:1", "registry-1.docker.io", "team/app", "1", "docker.io/team/app"),
        ("mcr.microsoft.com/windows/nanoserver:ltsc2022", "mcr.microsoft.com",
         "windows/nanoserver", "ltsc2022", "mcr.microsoft.com/windows/nanoserver"),
        (f"localhost:5000/app:v1@{DIGEST}", "localhost:5000", "app", DIGEST, "localhost:5000/app"),
        ("team/app", "registry-1.docker.io", "team/app", "latest", "team/app"),
    ],
)  # fmt: skip
def test_normalized_as_containerd_does(
    text: str, host: str, path: str, target: str, repository: str
) -> None:
    reference = parse_reference(text)
    assert (reference.host, reference.path, reference.target) == (host, path, target)
    assert reference.repository == repository


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("app@sha256:zz", "is not sha256:<64 hex>"),
        ("Upper/App:1", "is not a valid repository name"),
        ("app:" + "t" * 200, "is not a valid tag"),
    ],
)
def test_invalid_references_are_named(text: str, wanted: str) -> None:
    with pytest.raises(Failed, match=wanted):
        parse_reference(text)
