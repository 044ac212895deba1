from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wcow_operator.api.errors import parse_profile
from wcow_operator.api.v1alpha1 import WindowsRuntimeProfile

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "deploy" / "samples"

MakeProfile = Callable[..., WindowsRuntimeProfile]


def profile_document(name: str = "hv", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"isolation": "HyperV", "windowsBuild": "ltsc2022"}
    body.update(spec)
    return {
        "apiVersion": "runtime.wcow.dev/v1alpha1",
        "kind": "WindowsRuntimeProfile",
        "metadata": {"name": name},
        "spec": copy.deepcopy(body),
    }


@pytest.fixture
def make_profile() -> MakeProfile:
    def make(name: str = "hv", **spec: Any) -> WindowsRuntimeProfile:
        return parse_profile(profile_document(name, **spec))

    return make
