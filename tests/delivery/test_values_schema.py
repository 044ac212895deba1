"""values.schema.json turns a typo or a wrong type into an error at `helm install`, instead of a
value Helm would silently ignore."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from deploy.generate import CHART

from tests.delivery.helpers import lint, render


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"operater": {"replicas": 2}}, "additional properties 'operater' not allowed"),
        ({"operator": {"replica": 2}}, "additional properties 'replica' not allowed"),
        ({"agent": {"updateStrategy": {"maxUnavaliable": 2}}}, "'maxUnavaliable' not allowed"),
        ({"crds": {"keeep": False}}, "'keeep' not allowed"),
        ({"metrics": {"serviceMonitor": {"enable": True}}}, "'enable' not allowed"),
        ({"metrics": {"prometheusRules": {"enabled": True}}}, "'prometheusRules' not allowed"),
        ({"metrics": {"dashboard": {"label": {"a": "b"}}}}, "'label' not allowed"),
        ({"admissionPolicy": {"enabeld": False}}, "'enabeld' not allowed"),
        ({"webhook": {"certmanager": {"enabled": True}}}, "'certmanager' not allowed"),
        ({"profiles": {"hyperv": {"vm": {"memoryMb": 2048}}}}, "'memoryMb' not allowed"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_misspelt_keys_are_rejected(chart: Any, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=where):
        chart.validate_schema(values)
    # What a user sees: `helm install`/`template` renders nothing, `helm lint` reports it.
    with pytest.raises(helm_python.HelmValuesError, match=where):
        render(values)
    assert any(where in finding for finding in lint(values))


@pytest.mark.parametrize(
    ("values", "why"),
    [
        ({"operator": {"replicas": "2"}}, "want integer"),
        ({"operator": {"logFormat": "yaml"}}, "logFormat"),
        ({"operator": {"metricsPort": 70000}}, "metricsPort"),
        ({"agent": {"updateStrategy": {"maxUnavailable": 0}}}, "maxUnavailable"),
        ({"agent": {"updateStrategy": {"maxUnavailable": "0%"}}}, "maxUnavailable"),
        ({"operator": {"image": {"digest": "latest"}}}, "digest"),
        ({"admissionPolicy": {"validationActions": ["Block"]}}, "validationActions"),
        ({"admissionPolicy": {"validationActions": ["Deny", "Warn"]}}, "validationActions"),
        ({"agent": {"extraArgs": ["run; rm -rf"]}}, "extraArgs"),
        ({"profiles": {"hyperv": {"builds": ["ltsc2023"]}}}, "builds"),
        ({"profiles": {"hyperv": {"vm": {"memoryMB": 2047}}}}, "memoryMB"),
        ({"profiles": {"hyperv": {"vm": {"oversizedPods": "warn"}}}}, "oversizedPods"),
        ({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "interval"),
        ({"metrics": {"dashboard": {"namespace": "Monitoring"}}}, "namespace"),
        ({"metrics": {"prometheusRule": {"labels": {"release": 1}}}}, "labels"),
        ({"webhook": {"port": 443}}, "port"),  # the operator runs as non-root
        ({"webhook": {"certManager": {"issuerRef": {"namespace": "x"}}}}, "namespace"),
        ({"webhook": {"certManager": {"issuerRef": {"name": "a\nkind: X"}}}}, "name"),
        ({"webhook": {"certManager": {"issuerRef": {"name": "a", "kind": "Vault"}}}}, "kind"),
        ({"webhook": {"certManager": {"duration": "90 days"}}}, "duration"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_wrong_values_are_rejected(chart: Any, values: dict[str, Any], why: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=why):
        chart.validate_schema(values)


def test_defaults_and_documented_choices_are_accepted(chart: Any) -> None:
    chart.validate_schema({})
    chart.validate_schema(chart.values)
    chart.validate_schema(
        {
            "agent": {"updateStrategy": {"maxUnavailable": "25%"}},
            "profiles": {"hyperv": {"builds": ["ltsc2019", "10.0.26100", "20H2"]}},
            "admissionPolicy": {"validationActions": ["Warn", "Audit"]},
            "webhook": {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
                    "duration": "720h",
                    "renewBefore": "240h30m",
                }
            },
        }
    )
