"""Check pods for ``kubectl wcow verify`` and the chart's ``helm test``: create one pod in a
namespace, read it, delete it. The only writes of the plugin; their permissions
(``@writes``) are checked against ``rbac.VERIFY_NAMESPACE_RULES``."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from wcow_operator.controller.cluster_api import ApiError, Permission
from wcow_operator.k8s.reader import ClusterReader, declares
from wcow_operator.k8s.transport import TransportError, api_error

VERIFY_PERMISSIONS: dict[str, list[Permission]] = {}


writes = declares(VERIFY_PERMISSIONS)


class PodProber(ClusterReader):
    """The reader's reads, plus the check pod's life cycle."""

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self._transport.json(method, path, body)
        except (ApiException, *TransportError) as error:
            raise api_error(error) from None

    @writes(("", "pods", "create", "namespace", None))
    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._json("POST", f"/api/v1/namespaces/{namespace}/pods", body))

    @writes(("", "pods", "get", "namespace", None))
    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}"))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    @writes(("", "pods", "delete", "namespace", None))
    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self._json("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as error:
            if error.status != 404:
                raise
