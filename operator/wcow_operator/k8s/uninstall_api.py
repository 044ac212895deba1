"""The API calls of ``wcow-operator uninstall`` (the chart's pre-delete hook), made with the
operator's ServiceAccount: the reader's lists of profiles and Windows Nodes, plus deleting the
profiles (granted only while the hook runs: ``rbac.UNINSTALL_CLUSTER_RULES``) and reading and
replacing the plan ConfigMap (the operator's own rights, by name). ``UNINSTALL_PERMISSIONS``
declares them; a test checks each against those rules."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from wcow_contract.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_operator.controller.cluster_api import ApiError, Permission
from wcow_operator.k8s.reader import JSON, ClusterReader, declares
from wcow_operator.k8s.transport import TransportError, api_error

UNINSTALL_PERMISSIONS: dict[str, list[Permission]] = {
    "profiles": [(GROUP, PLURAL, "list", "cluster", None)],
    "runtime_classes": [("node.k8s.io", "runtimeclasses", "list", "cluster", None)],
    "windows_nodes": [("", "nodes", "list", "cluster", None)],
}

calls = declares(UNINSTALL_PERMISSIONS)


class UninstallApi(ClusterReader):
    """What the uninstall command reads and writes; one attempt per request (the command
    polls, so a failed read is tried again at the next poll)."""

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self._transport.json(method, path, body)
        except (ApiException, *TransportError) as error:
            raise api_error(error) from None

    @calls((GROUP, PLURAL, "delete", "cluster", None))
    def delete_profile(self, name: str) -> None:
        try:
            self._json("DELETE", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}")
        except ApiError as error:
            if error.status != 404:  # already gone: what we wanted
                raise

    @calls(("node.k8s.io", "runtimeclasses", "delete", "cluster", None))
    def delete_runtime_class(self, name: str, uid: str) -> None:
        """Delete it if it is still that object (a uid precondition)."""
        options = {"preconditions": {"uid": uid}}
        try:
            self._json("DELETE", f"/apis/node.k8s.io/v1/runtimeclasses/{name}", options)
        except ApiError as error:
            if error.status not in (404, 409):  # gone, or another object by now
                raise

    @calls(("", "configmaps", "list", "namespace", PLAN_CONFIGMAP))
    def plan(self, namespace: str) -> dict[str, Any] | None:
        """The plan ConfigMap (None: not there), listed by name: the operator may list and
        update it, not get it (RBAC applies resourceNames to a list by metadata.name)."""
        query = [("fieldSelector", f"metadata.name={PLAN_CONFIGMAP}")]
        body = self._get(f"/api/v1/namespaces/{namespace}/configmaps", query, JSON)
        items = json.loads(body).get("items") or []
        return dict(items[0]) if items else None

    @calls(("", "configmaps", "update", "namespace", PLAN_CONFIGMAP))
    def replace_plan(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace it as read (its resourceVersion makes the write conditional: 409 when
        the operator wrote it meanwhile)."""
        path = f"/api/v1/namespaces/{namespace}/configmaps/{PLAN_CONFIGMAP}"
        return dict(self._json("PUT", path, body))
