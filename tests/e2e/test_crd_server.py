"""The CRD on a real API server: its schema and CEL rules agree with the model, defaults are
applied by the server, and the printer columns read real fields.

The unit tests evaluate the CEL rules with cel-python; here the API server itself judges the
same documents (server-side dry run, so nothing is stored).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    installed_crd,
    profile,
    table_cells,
)
from tests.unit.test_crd import CROSS_FIELD_INVALID, _samples, _without_nulls, pydantic_accepts

pytestmark = pytest.mark.e2e

# Refused by the schema alone (types, enums, patterns, bounds), not by a CEL rule.
SCHEMA_INVALID = [
    ("spec.isolation", {"isolation": "Kata"}),
    (
        "spec.vm.processorCount",
        {"isolation": "HyperV", "windowsBuild": "ltsc2022", "vm": {"processorCount": 0}},
    ),
    ("spec.handler", {"isolation": "Process", "handler": "Not_A_DNS_Label"}),
    ("spec.isolation", {}),
]


@pytest.fixture(scope="module")
def custom(kube: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    with installed_crd(kube):
        yield client.CustomObjectsApi(kube)


def _dry_run_create(custom: client.CustomObjectsApi, document: dict[str, Any]) -> dict[str, Any]:
    return dict(
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, document, dry_run="All")
    )


@pytest.mark.parametrize("document", _samples(), ids=lambda d: d["metadata"]["name"])
def test_server_accepts_every_sample(
    custom: client.CustomObjectsApi, document: dict[str, Any]
) -> None:
    stored = _dry_run_create(custom, copy.deepcopy(document))
    assert stored["spec"]["isolation"] == document["spec"]["isolation"]


@pytest.mark.parametrize("document", CROSS_FIELD_INVALID, ids=str)
def test_server_refuses_what_the_model_refuses_across_fields(
    custom: client.CustomObjectsApi, document: dict[str, Any]
) -> None:
    document = _without_nulls(document)
    assert not pydantic_accepts(document)
    with pytest.raises(ApiException) as refused:
        _dry_run_create(custom, document)
    assert refused.value.status == 422, refused.value.body


@pytest.mark.parametrize(("field", "spec"), SCHEMA_INVALID, ids=[f for f, _ in SCHEMA_INVALID])
def test_server_refusal_names_the_field(
    custom: client.CustomObjectsApi, field: str, spec: dict[str, Any]
) -> None:
    with pytest.raises(ApiException) as refused:
        _dry_run_create(custom, profile("e2e-schema", **spec))
    assert refused.value.status == 422
    assert field in str(refused.value.body), refused.value.body


def test_server_applies_the_schema_defaults(custom: client.CustomObjectsApi) -> None:
    """What the server stores for a minimal profile is what the model would default to, so a
    `kubectl get -o yaml` shows the same values the operator acts on."""
    stored = _dry_run_create(
        custom, profile("e2e-defaults", isolation="HyperV", windowsBuild="ltsc2022")
    )
    from wcow_contract.errors import parse_profile

    model = parse_profile(stored)
    # Every default the server filled in equals the model's value for it.
    model_spec = model.spec.model_dump(by_alias=True, mode="json")
    for key, value in stored["spec"].items():
        assert model_spec[key] == value or isinstance(value, dict), (key, value)


def test_printer_columns_read_fields_that_exist(
    kube: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    """`kubectl get wrp -o wide`: the server evaluates each column's JSONPath on the stored
    object; a column pointing at a misspelt field would print nothing for every profile."""
    name = "e2e-columns"
    custom.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, profile(name, isolation="HyperV", windowsBuild="ltsc2022")
    )
    try:
        status = {
            "handler": "e2e-columns-h",
            "nodes": {"eligible": 7, "ready": 5, "failed": 0},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "NodesReady",
                    "message": "5 of 7 nodes ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
        custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, {"status": status})
        cells = table_cells(kube, name)
        assert cells["Isolation"] == "HyperV"
        assert cells["Build"] == "ltsc2022"
        assert cells["Handler"] == "e2e-columns-h"
        assert cells["Ready"] == "True"
        assert cells["Ready Nodes"] == 5
        assert cells["Eligible"] == 7
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"sandbox": {"image": "pause:3.9"}}, "spec.sandbox.image", "pinned_images.sandbox"),
        ({"sandbox": {"platform": "windows/arm64"}}, "spec.sandbox.platform", "amd64"),
        ({"annotations": {"pod": ["containerd.io/snapshot/*"]}}, "spec.annotations.pod", "'/'"),
    ],
    ids=["sandbox-image", "arm64", "two-slashes"],
)
def test_server_says_why_a_promise_windows_does_not_keep_is_refused(
    custom: client.CustomObjectsApi, spec: dict[str, Any], field: str, reason: str
) -> None:
    """The CEL rules name the field and give the reason, as the operator does."""
    document = profile("e2e-honest", isolation="Process", **spec)
    assert not pydantic_accepts(document)
    with pytest.raises(ApiException) as refused:
        _dry_run_create(custom, document)
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert field in body, body
    assert reason in body, body


@pytest.mark.parametrize(
    ("value", "accepted"),
    [(3, True), ("50%", True), (0, False), ("0%", False), ("x", False), ("101%", False)],
)
def test_server_judges_max_unavailable_as_the_model_does(
    custom: client.CustomObjectsApi, value: int | str, accepted: bool
) -> None:
    document = profile("e2e-rollout", isolation="Process", rollout={"maxUnavailable": value})
    assert pydantic_accepts(document) is accepted
    if accepted:
        _dry_run_create(custom, document)
        return
    with pytest.raises(ApiException) as refused:
        _dry_run_create(custom, document)
    assert refused.value.status == 422
    assert "maxUnavailable" in str(refused.value.body)
