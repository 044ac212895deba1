"""Reads and writes the pod admission webhook's configurations (one Mutating-, one
ValidatingWebhookConfiguration, both named ``WEBHOOK_CONFIGURATION``).

Each method declares its permission in ``PERMISSIONS``; a test checks them against
``wcow_operator.rbac`` (get and update by name; create, which RBAC cannot narrow by name; get of
the owning ClusterRole, by the name given at deploy time).
"""

from __future__ import annotations

from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from wcow_operator.controller.cluster_api import ApiError, Permission
from wcow_operator.k8s.transport import JsonTransport, TransportError, api_error
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION, OwnerReference

GROUP: Final = "admissionregistration.k8s.io"
PLURALS: Final = {
    "mutating": "mutatingwebhookconfigurations",
    "validating": "validatingwebhookconfigurations",
}
OWNER_NAME: Final = "<--webhook-owner-clusterrole>"  # known at deploy time only
RBAC_GROUP: Final = "rbac.authorization.k8s.io"
PERMISSIONS: Final[dict[str, list[Permission]]] = {
    "read": [
        (GROUP, plural, "get", "cluster", WEBHOOK_CONFIGURATION) for plural in PLURALS.values()
    ],
    "create": [(GROUP, plural, "create", "cluster", None) for plural in PLURALS.values()],
    "replace": [
        (GROUP, plural, "update", "cluster", WEBHOOK_CONFIGURATION) for plural in PLURALS.values()
    ],
    "owner": [(RBAC_GROUP, "clusterroles", "get", "cluster", OWNER_NAME)],
}


class WebhookConfigurations:
    """Not retried here: the keeper syncs again two seconds later."""

    def __init__(self, api_client: client.ApiClient, timeout_seconds: float = 15.0) -> None:
        self._transport = JsonTransport(api_client, timeout_seconds)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self._transport.json(method, path, body)
        except (ApiException, *TransportError) as error:
            raise api_error(error) from None

    @staticmethod
    def _path(kind: str, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/v1/{PLURALS[kind]}"
        return f"{base}/{name}" if name else base

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def read(self, kind: str) -> dict[str, Any] | None:
        return self._get(self._path(kind, WEBHOOK_CONFIGURATION))

    def owner(self, cluster_role: str) -> OwnerReference | None:
        """The owner reference to ``cluster_role``; None when it does not exist."""
        found = self._get(f"/apis/{RBAC_GROUP}/v1/clusterroles/{cluster_role}")
        if found is None:
            return None
        return OwnerReference(
            api_version=f"{RBAC_GROUP}/v1",
            kind="ClusterRole",
            name=found["metadata"]["name"],
            uid=found["metadata"]["uid"],
        )

    def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self._call("POST", self._path(kind), body)
        return created

    def replace(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace, with the resourceVersion in ``body`` as the precondition (409 if stale)."""
        replaced: dict[str, Any] = self._call(
            "PUT", self._path(kind, body["metadata"]["name"]), body
        )
        return replaced
