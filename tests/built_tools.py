"""Binaries the tests build from pinned Go modules (the registry, promtool): present, or the
test skips with how to build it, or fails under ``WCOW_E2E_REQUIRED=1`` (``make e2e``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def require_built(binary: Path, what: str, build_script: Path) -> Path:
    """``binary`` when it is built; otherwise skip (or fail) naming ``what`` and the script."""
    if os.access(binary, os.X_OK):
        return binary
    reason = (
        f"{what} is not built ({binary.relative_to(ROOT)} is missing): it needs Go 1.25+ and "
        f"the Go module proxy; run {build_script.relative_to(ROOT)} (or `make test`)"
    )
    if os.environ.get("WCOW_E2E_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
