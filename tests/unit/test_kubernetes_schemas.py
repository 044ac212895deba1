"""Rendered RuntimeClasses and the plan ConfigMap validate against the Kubernetes schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.conftest import SAMPLES, MakeProfile
from wcow_operator.cli import load_profiles
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.profile_set import render_all
from wcow_operator.render.runtimeclass import render_runtime_class

VERSION = kubernetes_validate.latest_version()


def _rendered() -> list[dict[str, Any]]:
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    rendered = render_all([item.profile for item in loaded])
    return [*rendered.runtime_classes, plan_config_map(rendered.plan, "wcow-system")]


@pytest.mark.parametrize(
    "document", _rendered(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_sample_outputs_validate(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, VERSION, strict=True)


def test_every_option_combination_validates(make_profile: MakeProfile) -> None:
    profile = make_profile(
        "full",
        handler="full-handler",
        sandbox={"platform": "windows/amd64"},
        vm={"processorCount": 8, "memoryMB": 16384, "fullyPhysicallyBacked": True},
        overhead={"podFixed": {"cpu": "250m", "memory": "1.5Gi"}},
        scheduling={
            "nodeSelector": {"example.com/pool": "hyperv"},
            "tolerations": [
                {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"},
                {"key": "x", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            ],
        },
    )
    kubernetes_validate.validate(render_runtime_class(profile), VERSION, strict=True)
