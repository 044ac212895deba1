"""Fixtures of the `wcow admit` tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admission.pods import FROM_LIMITS, write_documents
from tests.conftest import profile_document


@pytest.fixture
def profiles_file(tmp_path: Path) -> Path:
    """sized (FromPodLimits), fixed (hcsshim's default VM) and lenient (the default VM,
    spec.vm.oversizedPods: Warn)."""
    return write_documents(
        tmp_path / "profiles.yaml",
        profile_document("sized", vm=FROM_LIMITS),
        profile_document("fixed"),
        profile_document("lenient", vm={"oversizedPods": "Warn"}),
    )
