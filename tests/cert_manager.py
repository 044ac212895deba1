"""cert-manager's own CRDs, from the module pinned in tools/cert-manager/go.mod (the Go module
cache; downloaded from the Go module proxy on first use). The chart's Issuers and Certificates
are validated against them, and the e2e suite installs them into the local control plane."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.go_modules import GoModuleUnavailableError, module_dir

TOOLS = ROOT / "tools" / "cert-manager"
MODULE = "github.com/cert-manager/cert-manager"
CRD_FILES = ("cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml",
             "cert-manager.io_clusterissuers.yaml")  # fmt: skip


# Raised without Go or the module (kept under its old name for the callers).
CertManagerUnavailableError = GoModuleUnavailableError


@functools.cache
def crds() -> tuple[dict[str, Any], ...]:
    """The CRDs of the pinned cert-manager (raises CertManagerUnavailableError without Go)."""
    directory = module_dir(TOOLS, MODULE) / "deploy" / "crds"
    return tuple(
        yaml.safe_load((directory / name).read_text(encoding="utf-8")) for name in CRD_FILES
    )


def schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of a cert-manager.io/v1 kind."""
    for crd in crds():
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
            found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return found
    raise KeyError(kind)
