"""The operator's adapter to the Kubernetes API (the controller's ``ClusterApi``).

Objects go in and come out as plain JSON dicts (camelCase, as kubectl shows them). Every
method declares the API permission it uses (``@uses``); a test checks each against the RBAC
rules in ``wcow_operator.rbac``, so the ClusterRole never lags the code.
Requests go through ``k8s.transport``. Transient failures (429, 5xx, timeouts, dropped
connections) are retried here with ``support.retry``; 409 and the rest surface as
``ApiError`` so the controller can re-read and decide again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from wcow_contract.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator.controller.cluster_api import (
    ApiError,
    ClusterApi,
    Page,
    Permission,
    Watched,
    WatchExpiredError,
)
from wcow_operator.k8s.transport import JsonTransport, TransportError, api_error
from wcow_support.retry import Backoff, retry

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
RETRYABLE = {429, 500, 502, 503, 504}
WRITES = ("create", "update", "patch", "delete")
# 0.5 s, 1 s, 2 s between the four attempts, spread so that replicas do not retry in step.
BACKOFF = Backoff(initial=0.5, maximum=8.0, jitter=0.2)
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
        self._transport = JsonTransport(api_client, timeout_seconds)
        self._on_error = on_error or (lambda _verb, _resource, _code: None)
        self._on_write = on_write or (lambda _verb, _resource: None)
        self._attempts = attempts

    # -- plumbing ------------------------------------------------------------------------

    def _call(self, verb: str, resource: str, call: Callable[[], T]) -> T:
        """``call()`` with transient failures retried (``BACKOFF``, or the server's
        Retry-After); every failure counted, the last one raised as ``ApiError``."""

        def counted() -> T:
            try:
                return call()
            except ApiException as error:
                self._on_error(verb, resource, error.status or 0)
                raise
            except TransportError:
                self._on_error(verb, resource, 0)
                raise

        try:
            result = retry(
                counted,
                attempts=self._attempts,
                backoff=BACKOFF,
                retryable=_transient,
                wait_hint=_retry_after,
                on_retry=lambda attempt, _error, _wait: log.warning(
                    "retrying %s %s (attempt %d)", verb, resource, attempt
                ),
            )
        except (ApiException, *TransportError) as error:
            raise api_error(error) from None
        if verb in WRITES:
            self._on_write(verb, resource)
        return result

    # -- watches (the informers' transport) -----------------------------------------------

    @uses(
        (GROUP, PLURAL, "list", "cluster", None),
        ("node.k8s.io", "runtimeclasses", "list", "cluster", None),
        ("", "nodes", "list", "cluster", None),
        ("", "configmaps", "list", "namespace", PLAN_CONFIGMAP),
        ("", "configmaps", "list", "namespace", ROLLOUT_CONFIGMAP),
    )
    def list_page(self, watched: Watched, continue_token: str | None, limit: int) -> Page:
        query = [*_selectors(watched), ("limit", str(limit))]
        if continue_token:
            query.append(("continue", continue_token))
        accept = _METADATA_LIST if watched.metadata_only else "application/json"
        body = self._call(
            "list", watched.resource, lambda: self._transport.request(watched.path, query, accept)
        )
        data = json.loads(body.read())
        metadata = data.get("metadata") or {}
        return Page(
            items=list(data.get("items") or []),
            resource_version=str(metadata.get("resourceVersion", "")),
            continue_token=metadata.get("continue") or None,
        )

    @uses(
        (GROUP, PLURAL, "watch", "cluster", None),
        ("node.k8s.io", "runtimeclasses", "watch", "cluster", None),
        ("", "nodes", "watch", "cluster", None),
        ("", "configmaps", "watch", "namespace", PLAN_CONFIGMAP),
        ("", "configmaps", "watch", "namespace", ROLLOUT_CONFIGMAP),
    )
    def watch(
        self, watched: Watched, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events from ``resource_version`` until the server ends the watch; raises
        ``WatchExpiredError`` when the server no longer has that version (410 Gone)."""
        query = [
            *_selectors(watched),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        accept = _METADATA_OBJECT if watched.metadata_only else "application/json"
        try:
            response = self._call(
                "watch",
                watched.resource,
                lambda: self._transport.request(watched.path, query, accept, timeout_seconds + 30),
            )
        except ApiError as error:
            if error.status == 410:
                raise WatchExpiredError(str(error)) from None
            raise
        try:
            for line in _lines(response.response):
                event: dict[str, Any] = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpiredError(str(status.get("message", "")))
                    raise ApiError(
                        int(status.get("code") or 0),
                        str(status.get("reason", "")),
                        str(status.get("message", "")),
                    )
                yield event
        finally:
            response.response.release_conn()

    # -- writes --------------------------------------------------------------------------

    @uses(("node.k8s.io", "runtimeclasses", "create", "cluster", None))
    def create_runtime_class(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._rest("create", "runtimeclasses", "POST", _RUNTIME_CLASSES, body)

    @uses(("node.k8s.io", "runtimeclasses", "update", "cluster", None))
    def replace_runtime_class(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._rest("update", "runtimeclasses", "PUT", f"{_RUNTIME_CLASSES}/{name}", body)

    @uses(("node.k8s.io", "runtimeclasses", "delete", "cluster", None))
    def delete_runtime_class(self, name: str, uid: str) -> None:
        options = {"preconditions": {"uid": uid}}
        try:
            self._rest("delete", "runtimeclasses", "DELETE", f"{_RUNTIME_CLASSES}/{name}", options)
        except ApiError as error:
            if error.status != 404:  # already gone: what we wanted
                raise

    @uses(("", "configmaps", "create", "namespace", None))
    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        return self._rest("create", "configmaps", "POST", path, body)

    @uses(
        ("", "configmaps", "update", "namespace", PLAN_CONFIGMAP),
        ("", "configmaps", "update", "namespace", ROLLOUT_CONFIGMAP),
    )
    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        return self._rest("update", "configmaps", "PUT", path, body)

    @uses((GROUP, PLURAL, "patch", "cluster", None))
    def patch_profile(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._rest("patch", PLURAL, "PATCH", f"{_PROFILES}/{name}", patch)

    @uses((GROUP, f"{PLURAL}/status", "update", "cluster", None))
    def update_profile_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"{_PROFILES}/{name}/status"
        return self._rest("update", f"{PLURAL}/status", "PUT", path, body)

    @uses(("", "events", "create", "cluster", None))
    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._rest("create", "events", "POST", f"/api/v1/namespaces/{namespace}/events", body)

    # -- drain before a restart (reconcile.drain) ----------------------------------------

    @uses(("", "nodes", "get", "cluster", None))
    def get_node(self, name: str) -> dict[str, Any]:
        path = f"/api/v1/nodes/{name}"
        result: dict[str, Any] = self._call(
            "get", "nodes", lambda: self._transport.json("GET", path)
        )
        return result

    @uses(("", "nodes", "patch", "cluster", None))
    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._rest("patch", "nodes", "PATCH", f"/api/v1/nodes/{name}", patch)

    @uses(("", "pods", "list", "cluster", None))
    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to ``node`` (one page: a node runs at most a few hundred)."""
        query = [("fieldSelector", f"spec.nodeName={node}"), ("limit", str(MAX_NODE_PODS))]
        body = self._call(
            "list",
            "pods",
            lambda: self._transport.request("/api/v1/pods", query, "application/json"),
        )
        return list(json.loads(body.read()).get("items") or [])

    @uses(("", "pods/eviction", "create", "cluster", None))
    def evict_pod(self, namespace: str, name: str) -> str | None:
        """Ask to evict a pod (policy/v1 Eviction, honouring its PodDisruptionBudgets).
        None: accepted, or the pod is gone; else why it was refused (a 429: a budget that
        allows no disruption now, in the server's words), to be asked again later."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }

        def once() -> str | None:
            try:
                self._transport.json("POST", path, eviction)
            except ApiException as error:
                if error.status == 404:
                    return None
                if error.status == 429:  # a budget said no: not transient within a call
                    return _refusal(error)
                raise
            return None

        return self._call("create", "pods/eviction", once)

    def _rest(
        self, verb: str, resource: str, method: str, path: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """One JSON request (writes carry the field manager; patches are merge patches)."""
        result: dict[str, Any] = (
            self._call(verb, resource, lambda: self._transport.json(method, path, body)) or {}
        )
        return result


_PROFILES = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
_RUNTIME_CLASSES = "/apis/node.k8s.io/v1/runtimeclasses"
# Nodes are large (images, conditions): their watch asks for metadata only.
_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


MAX_NODE_PODS = 1000


def _refusal(error: ApiException) -> str:
    """A refused eviction in the server's words: the message and its causes (a
    PodDisruptionBudget names itself there)."""
    try:
        status = json.loads(error.body or "")
    except (TypeError, ValueError):
        return str(error.reason or error.status)
    causes = [str(c.get("message", "")) for c in (status.get("details") or {}).get("causes") or []]
    text = " ".join([str(status.get("message", "")), *causes]).strip()
    return text[:512] or str(error.reason or error.status)


def _selectors(watched: Watched) -> list[tuple[str, str]]:
    query = []
    if watched.label_selector:
        query.append(("labelSelector", watched.label_selector))
    if watched.field_selector:
        query.append(("fieldSelector", watched.field_selector))
    return query


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited JSON of a watch, as it arrives."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buffer.strip():
        yield buffer


def _transient(error: Exception) -> bool:
    """Worth another attempt: no answer, too many requests, or a server error."""
    return isinstance(error, TransportError) or (
        isinstance(error, ApiException) and error.status in RETRYABLE
    )


def _retry_after(error: Exception) -> float | None:
    """The server's Retry-After, in seconds (at most 30)."""
    if not isinstance(error, ApiException):
        return None
    value = (error.headers or {}).get("Retry-After")
    try:
        return min(float(value), 30.0) if value is not None else None
    except ValueError:
        return None
