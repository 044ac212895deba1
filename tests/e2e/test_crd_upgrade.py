"""Upgrading the CRD in place on a real API server, as `kubectl apply` or `helm upgrade` does.

Up to 3b8e44a `status.conditions` was `x-kubernetes-list-type: map` (keyed by type); it is an
atomic list now (the operator writes it whole; `docs/architecture.md`). A profile stored
under the earlier schema, its status written as the operator wrote it then, must read back
after the upgrade and take the operator's status update as it sends it now.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.operator_harness import CRD_FILE, GROUP, PLURAL, VERSION, installed_crd, profile
from wcow_operator.controller.controller import status_update
from wcow_operator.reconcile.model import Write

pytestmark = pytest.mark.e2e


def _earlier_crd() -> dict[str, Any]:
    """The CRD as it was up to 3b8e44a: conditions a list map keyed by type."""
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    earlier = copy.deepcopy(crd)
    for version in earlier["spec"]["versions"]:
        conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
            "conditions"
        ]
        conditions["x-kubernetes-list-type"] = "map"
        conditions["x-kubernetes-list-map-keys"] = ["type"]
    return earlier


def _condition(type_: str, status: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": "Tested",
        "message": "",
        "lastTransitionTime": "2026-11-28T00:00:00Z",
    }


def test_a_profile_written_under_the_earlier_schema_survives_the_upgrade(
    kube: client.ApiClient, prefix: str
) -> None:
    custom = client.CustomObjectsApi(kube)
    name = f"{prefix}-upgrade"
    with installed_crd(kube, _earlier_crd()):
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(name, isolation="Process")
        )
        try:
            # As the operator wrote it before: a merge patch of the status.
            custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                name,
                {"status": {"conditions": [_condition("Valid", "True")]}},
            )
            with installed_crd(kube):  # the CRD of this release, replacing the earlier one
                stored = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
                assert stored["status"]["conditions"] == [_condition("Valid", "True")]
                status = {"conditions": [_condition("Valid", "True"), _condition("Ready", "False")]}
                write = Write("update-status", name, {"status": status}, observed=stored)
                updated = custom.replace_cluster_custom_object_status(
                    GROUP, VERSION, PLURAL, name, status_update(write)
                )
                assert updated["status"] == status
                # A status computed from the version before that update is refused (409).
                with pytest.raises(client.ApiException) as refused:
                    custom.replace_cluster_custom_object_status(
                        GROUP, VERSION, PLURAL, name, status_update(write)
                    )
                assert refused.value.status == 409
        finally:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
