"""Read-only access for ``kubectl wcow`` (wcow_operator.plugin): what a person with the
chart's ``<fullname>-viewer`` roles may read, and nothing else.

Every method declares the permission it uses (``@reads``); a test checks each against
``rbac.VIEWER_CLUSTER_RULES`` and ``VIEWER_NAMESPACE_RULES``, so the roles never lag the code.
One attempt per request: a person is waiting, and a failure is reported with the request,
not retried behind their back. Every answer is bounded (page sizes, item counts, log bytes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Final, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from wcow_contract.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator.controller.cluster_api import ApiError, Permission
from wcow_operator.k8s.transport import JsonTransport, TransportError, api_error
from wcow_operator.rbac import OPERATOR_LEASE
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION

F = TypeVar("F", bound=Callable[..., Any])
PAGE: Final = 250
MAX_ITEMS: Final = 20_000  # per list: far above any fleet, far below what exhausts memory
MAX_LOG_BYTES: Final = 2 * 1024 * 1024  # per container log (the server cuts it: limitBytes)
WINDOWS: Final = "kubernetes.io/os=windows"
ADMISSION: Final = "/apis/admissionregistration.k8s.io/v1"
JSON: Final = "application/json"
METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

VIEWER_PERMISSIONS: dict[str, list[Permission]] = {}


def declares(
    registry: dict[str, list[Permission]],
) -> Callable[..., Callable[[F], F]]:
    """A decorator that records in ``registry`` the (group, resource, verb, scope, name)
    each method needs, for the RBAC tests."""

    def declare(*permissions: Permission) -> Callable[[F], F]:
        def mark(method: F) -> F:
            registry[method.__name__] = list(permissions)
            return method

        return mark

    return declare


reads = declares(VIEWER_PERMISSIONS)


def kubeconfig_client(path: str | None, context: str | None) -> client.ApiClient:
    """An API client from the kubeconfig (``path``, else $KUBECONFIG or ~/.kube/config),
    as kubectl would pick it, or in a pod without one its ServiceAccount; raises
    ``ApiError`` (status 0) when there is none."""
    configuration = client.Configuration()
    try:
        if not path and not context and _in_cluster():
            # A pod (the chart's helm test): its ServiceAccount.
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration
            )
    except (config.ConfigException, OSError) as error:
        raise ApiError(0, "NoKubeconfig", f"cannot load the kubeconfig: {error}") from None
    return client.ApiClient(configuration)


def _in_cluster() -> bool:
    """In a pod, with no kubeconfig of its own: the service account's token is mounted."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


class ClusterReader:
    def __init__(self, api_client: client.ApiClient, timeout_seconds: float = 15.0) -> None:
        self._transport = JsonTransport(api_client, timeout_seconds)
        self.server = str(api_client.configuration.host)

    def _get(self, path: str, query: list[tuple[str, str]], accept: str) -> bytes:
        try:
            response = self._transport.request(path, query, accept)
            return bytes(response.read())
        except (ApiException, *TransportError) as error:
            raise api_error(error) from None

    def _object(self, path: str) -> dict[str, Any] | None:
        """One object, None when it does not exist."""
        try:
            return dict(json.loads(self._get(path, [], JSON)))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def _list(
        self, path: str, query: list[tuple[str, str]], accept: str = JSON
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            page = [*query, ("limit", str(PAGE))] + ([("continue", token)] if token else [])
            data = json.loads(self._get(path, page, accept))
            items.extend(data.get("items") or [])
            token = str((data.get("metadata") or {}).get("continue") or "")
            if not token or len(items) >= MAX_ITEMS:
                return items[:MAX_ITEMS]

    @reads((GROUP, PLURAL, "list", "cluster", None))
    def profiles(self) -> list[dict[str, Any]]:
        return self._list(f"/apis/{GROUP}/{VERSION}/{PLURAL}", [])

    @reads(("node.k8s.io", "runtimeclasses", "list", "cluster", None))
    def runtime_classes(self) -> list[dict[str, Any]]:
        return self._list("/apis/node.k8s.io/v1/runtimeclasses", [])

    @reads(("", "nodes", "list", "cluster", None))
    def windows_nodes(
        self, name: str | None = None, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        """The Windows Nodes (or the one named): whole, or only their metadata (labels and
        the agent's report; a Node's images and status can weigh 50 KiB each)."""
        query = [("labelSelector", WINDOWS)]
        if name:
            query.append(("fieldSelector", f"metadata.name={name}"))
        return self._list("/api/v1/nodes", query, METADATA_LIST if metadata_only else JSON)

    @reads(
        ("", "configmaps", "get", "namespace", PLAN_CONFIGMAP),
        ("", "configmaps", "get", "namespace", ROLLOUT_CONFIGMAP),
    )
    def plan_and_rollout(self, namespace: str) -> dict[str, dict[str, Any] | None]:
        """The plan and rollout ConfigMaps by name (None: not there)."""
        base = f"/api/v1/namespaces/{namespace}/configmaps"
        return {
            name: self._object(f"{base}/{name}") for name in (PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP)
        }

    @reads(("coordination.k8s.io", "leases", "get", "namespace", OPERATOR_LEASE))
    def leader_lease(self, namespace: str) -> dict[str, Any] | None:
        """The operator's Lease: who leads, since when."""
        return self._object(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{OPERATOR_LEASE}"
        )

    @reads(("", "events", "list", "cluster", None))
    def events(self, namespace: str, field_selector: str = "") -> list[dict[str, Any]]:
        query = [("fieldSelector", field_selector)] if field_selector else []
        return self._list(f"/api/v1/namespaces/{namespace}/events", query)

    @reads(("", "pods", "list", "namespace", None))
    def pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._list(
            f"/api/v1/namespaces/{namespace}/pods", [("labelSelector", label_selector)]
        )

    @reads(("", "pods/log", "get", "namespace", None))
    def pod_log(self, namespace: str, pod: str, container: str, *, previous: bool) -> str:
        """The container's log (its previous instance's with ``previous``), at most
        ``MAX_LOG_BYTES``, cut by the server."""
        query = [
            ("container", container),
            ("previous", "true" if previous else "false"),
            ("limitBytes", str(MAX_LOG_BYTES)),
        ]
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        return self._get(path, query, "*/*")[:MAX_LOG_BYTES].decode("utf-8", "replace")

    @reads(
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "cluster",
         WEBHOOK_CONFIGURATION),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "cluster",
         WEBHOOK_CONFIGURATION),
    )  # fmt: skip
    def webhook_configurations(self) -> dict[str, dict[str, Any] | None]:
        """The operator's two webhook configurations by kind (None: not there)."""
        return {
            kind: self._object(f"{ADMISSION}/{kind}/{WEBHOOK_CONFIGURATION}")
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        }
