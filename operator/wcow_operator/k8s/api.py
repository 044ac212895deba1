"""The one module of the operator that talks to the Kubernetes API.

Objects go in and come out as plain JSON dicts (camelCase, as kubectl shows them). Every
method declares the API permission it uses (``@uses``); a test checks each against the RBAC
rules in ``wcow_operator.rbac``, so the ClusterRole never lags the code.
Transient failures (429, 5xx, timeouts, dropped connections) are retried here with backoff;
409 and the rest surface as ``ApiError`` so the controller can re-read and decide again.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from wcow_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_operator.controller.api import ApiError, ClusterApi, Permission
from wcow_operator.render.plan import PLAN_CONFIGMAP

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
FIELD_MANAGER = "wcow-operator"
RETRYABLE = {429, 500, 502, 503, 504}
WINDOWS_NODES = "kubernetes.io/os=windows"

PERMISSIONS: dict[str, list[Permission]] = {}


def uses(*permissions: Permission) -> Callable[[F], F]:
    """Declare the (group, resource, verb, scope) a method needs; scope is cluster|namespace."""

    def mark(method: F) -> F:
        PERMISSIONS[method.__name__] = list(permissions)
        return method

    return mark


def load_client_config() -> client.ApiClient:
    """In-cluster service account when running in a pod, else the local kubeconfig."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 16  # the controller writes in parallel
    return client.ApiClient(configuration)


class KubernetesApi(ClusterApi):
    def __init__(
        self,
        api_client: client.ApiClient,
        on_error: Callable[[str, str, int], None] | None = None,
        on_write: Callable[[str, str], None] | None = None,
        attempts: int = 4,
        timeout_seconds: float = 30.0,
    ) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._node = client.NodeV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._on_error = on_error or (lambda _verb, _resource, _code: None)
        self._on_write = on_write or (lambda _verb, _resource: None)
        self._attempts = attempts
        self._timeout = timeout_seconds

    # -- plumbing ------------------------------------------------------------------------

    def _call(self, verb: str, resource: str, call: Callable[[], T]) -> T:
        delay = 0.5
        for attempt in range(1, self._attempts + 1):
            try:
                result = call()
            except ApiException as error:
                self._on_error(verb, resource, error.status or 0)
                retry_after = _retry_after(error)
                if error.status not in RETRYABLE or attempt == self._attempts:
                    raise ApiError(error.status or 0, error.reason or "", _message(error)) from None
                time.sleep(retry_after if retry_after is not None else delay)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._on_error(verb, resource, 0)
                if attempt == self._attempts:
                    raise ApiError(0, type(error).__name__, str(error)) from None
                time.sleep(delay)
            else:
                if verb in ("create", "update", "patch", "delete"):
                    self._on_write(verb, resource)
                return result
            delay = min(delay * 2, 8.0) * random.uniform(0.8, 1.2)  # noqa: S311 - jitter
            log.warning("retrying %s %s (attempt %d)", verb, resource, attempt + 1)
        raise AssertionError("unreachable")

    def _json(self, verb: str, resource: str, call: Callable[[], Any]) -> Any:
        response = self._call(verb, resource, call)
        return json.loads(response.data) if response.data else {}

    # -- reads ---------------------------------------------------------------------------

    @uses((GROUP, PLURAL, "list", "cluster", None))
    def list_profiles(self) -> list[dict[str, Any]]:
        body = self._json(
            "list",
            PLURAL,
            lambda: self._custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        return list(body.get("items", []))

    @uses(("node.k8s.io", "runtimeclasses", "list", "cluster", None))
    def list_runtime_classes(self) -> list[dict[str, Any]]:
        body = self._json(
            "list",
            "runtimeclasses",
            lambda: self._node.list_runtime_class(
                _preload_content=False, _request_timeout=self._timeout
            ),
        )
        return [
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", **item}
            for item in body.get("items", [])
        ]

    @uses(("", "configmaps", "get", "namespace", PLAN_CONFIGMAP))
    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = self._json(
                "get",
                "configmaps",
                lambda: self._core.read_namespaced_config_map(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return body

    @uses(("", "nodes", "list", "cluster", None))
    def list_windows_nodes(self) -> list[dict[str, Any]]:
        body = self._json(
            "list",
            "nodes",
            lambda: self._core.list_node(
                label_selector=WINDOWS_NODES, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        # Keep only metadata: node objects are large and the controller needs labels and
        # annotations.
        return [{"metadata": item.get("metadata", {})} for item in body.get("items", [])]

    # -- writes --------------------------------------------------------------------------

    @uses(("node.k8s.io", "runtimeclasses", "create", "cluster", None))
    def create_runtime_class(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "create",
            "runtimeclasses",
            lambda: self._node.create_runtime_class(
                _raw(body),
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses(("node.k8s.io", "runtimeclasses", "update", "cluster", None))
    def replace_runtime_class(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "update",
            "runtimeclasses",
            lambda: self._node.replace_runtime_class(
                name,
                _raw(body),
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses(("node.k8s.io", "runtimeclasses", "delete", "cluster", None))
    def delete_runtime_class(self, name: str, uid: str) -> None:
        options = {"preconditions": {"uid": uid}}
        try:
            self._call(
                "delete",
                "runtimeclasses",
                lambda: self._node.delete_runtime_class(
                    name, body=_raw(options), _request_timeout=self._timeout
                ),
            )
        except ApiError as error:
            if error.status != 404:  # already gone: what we wanted
                raise

    @uses(("", "configmaps", "create", "namespace", None))
    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "create",
            "configmaps",
            lambda: self._core.create_namespaced_config_map(
                namespace,
                _raw(body),
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses(("", "configmaps", "update", "namespace", PLAN_CONFIGMAP))
    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "update",
            "configmaps",
            lambda: self._core.replace_namespaced_config_map(
                name,
                namespace,
                _raw(body),
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses((GROUP, PLURAL, "patch", "cluster", None))
    def patch_profile(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "patch",
            PLURAL,
            lambda: self._custom.patch_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                name,
                patch,
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses((GROUP, f"{PLURAL}/status", "patch", "cluster", None))
    def patch_profile_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "patch",
            f"{PLURAL}/status",
            lambda: self._custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                name,
                patch,
                field_manager=FIELD_MANAGER,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return result

    @uses(("", "events", "create", "cluster", None))
    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._json(  # reads the answer, so the connection goes back to the pool
            "create",
            "events",
            lambda: self._core.create_namespaced_event(
                namespace, _raw(body), _preload_content=False, _request_timeout=self._timeout
            ),
        )


def _raw(body: dict[str, Any]) -> Any:
    """The client's signatures name model classes; it sends plain dicts as they are."""
    return body


def _retry_after(error: ApiException) -> float | None:
    value = (error.headers or {}).get("Retry-After")
    try:
        return min(float(value), 30.0) if value is not None else None
    except ValueError:
        return None


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "").get("message", error.body))
    except (TypeError, ValueError):
        return str(error.body or error.reason)
