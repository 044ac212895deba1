"""The Kubernetes adapter: the only module of the agent that imports ``kubernetes``."""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from wcow_agent.cycle.rollout_verdict import is_paced
from wcow_agent.loop.cluster import (
    FIELD_MANAGER,
    ClusterError,
    NodeObject,
    PlanObject,
    RolloutObject,
    WatchExpiredError,
)
from wcow_contract.wire.plan import PLAN_CONFIGMAP, PLAN_HASH_ANNOTATION, PLAN_KEY
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, ROLLOUT_KEY
from wcow_contract.wire.uninstall import UNINSTALL_ANNOTATION

ApiException = kubernetes.client.exceptions.ApiException
# What a call can raise besides an answer: an error status, or no answer at all (connection
# refused or reset while the API server restarts). Both are a ClusterError to the agent, so
# the loop and the watch threads retry; a raw urllib3 error used to kill the watch threads.
FAILED = (ApiException, urllib3.exceptions.HTTPError)


def _error(action: str, error: Exception) -> ClusterError:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None) or str(error)
    kind = WatchExpiredError if status == 410 else ClusterError
    return kind(f"{action}: {status or ''} {reason}".strip(), status)


def _body(response: Any) -> bytes:
    """The bytes of an answer asked for with ``_preload_content=False``; its connection
    goes back to the pool."""
    try:
        return bytes(response.data)
    finally:
        response.release_conn()


def _config_map_parts(config_map: Any) -> tuple[str | None, dict[str, str], dict[str, str]]:
    """(resourceVersion, annotations, data) of a ConfigMap: the JSON a ``JsonWatch``
    delivers, or the client's typed model (a read)."""
    if isinstance(config_map, dict):
        metadata = config_map.get("metadata") or {}
        return (
            metadata.get("resourceVersion"),
            metadata.get("annotations") or {},
            config_map.get("data") or {},
        )
    metadata = config_map.metadata
    return (
        metadata.resource_version if metadata else None,
        (metadata.annotations if metadata else None) or {},
        config_map.data or {},
    )


def _plan_object(config_map: Any, deleted: bool = False) -> PlanObject:
    version, annotations, data = _config_map_parts(config_map)
    return PlanObject(
        exists=not deleted,
        text=None if deleted else data.get(PLAN_KEY),
        resource_version=version,
        paced=not deleted and is_paced(annotations),
        uninstall=None if deleted else _annotation(annotations, UNINSTALL_ANNOTATION, 64),
        announced_hash=None if deleted else _annotation(annotations, PLAN_HASH_ANNOTATION, 80),
    )


def _annotation(annotations: Mapping[str, str], key: str, limit: int) -> str | None:
    value = annotations.get(key)
    return None if value is None else str(value)[:limit]


def _rollout_object(config_map: Any, deleted: bool = False) -> RolloutObject:
    version, _, data = _config_map_parts(config_map)
    return RolloutObject(
        exists=not deleted,
        text=None if deleted else data.get(ROLLOUT_KEY),
        resource_version=version,
    )


SERVICE_ACCOUNT = Path("var/run/secrets/kubernetes.io/serviceaccount")


def load_credentials(environ: Mapping[str, str]) -> None:
    """The service account token where the pod sees it. HostProcess containers on
    containerd 1.6 find their volumes only under CONTAINER_SANDBOX_MOUNT_POINT, not at
    /var/run/secrets (1.7+ has both), so look there when the usual path is missing."""
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        pass
    else:
        return
    mount = environ.get("CONTAINER_SANDBOX_MOUNT_POINT")
    account = Path(mount) / SERVICE_ACCOUNT if mount else None
    if account is not None and (account / "token").exists():
        kubernetes.config.incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(account / "token"),
            cert_filename=str(account / "ca.crt"),
            environ=environ,
        ).load_and_set()
        return
    kubernetes.config.load_kube_config(environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]


class JsonWatch(kubernetes.watch.Watch):
    """A watch whose events carry the object as JSON, not as the client's model: every
    agent reads every rollout write, and building a V1ConfigMap costs about three times the
    JSON parse (with 200 simulated agents in one process, most of a hand-over's CPU).
    Not ``stream(deserialize=False)``: in client 37 that path reads ``raw_object`` from an
    ERROR event, which only this method sets, so a 410 would raise KeyError."""

    def unmarshal_event(self, data: str, return_type: Any) -> Any:
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return None
        event["raw_object"] = event.get("object")
        return event


class KubernetesCluster:
    """``Cluster`` over a CoreV1Api; ``watch_factory`` makes ``kubernetes.watch.Watch``
    objects (replaced in tests)."""

    def __init__(
        self,
        core: Any,
        watch_factory: Callable[[], Any] | None = None,
        component: str = FIELD_MANAGER,
    ) -> None:
        self.core = core
        self.watch_factory = watch_factory or JsonWatch
        self.component = component
        self._watches: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KubernetesCluster:
        """In-cluster credentials (the DaemonSet's service account), or KUBECONFIG."""
        load_credentials(os.environ if environ is None else environ)
        return cls(kubernetes.client.CoreV1Api())

    @classmethod
    def from_kubeconfig(cls, path: str | None = None) -> KubernetesCluster:
        """A client with connections of its own, from a kubeconfig (``wcow-agent simulate``
        runs many agents in one process: one client each, as on separate nodes)."""
        api_client = kubernetes.config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
        return cls(kubernetes.client.CoreV1Api(api_client))

    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def close(self) -> None:
        """Abort open watches (``Watch.stop`` shuts their sockets down, so a thread blocked
        reading one returns) and close the connections."""
        with self._lock:
            self._closed = True
            watches = list(self._watches)
        for watch in watches:
            watch.stop()
        self.core.api_client.close()

    def register_node(
        self,
        name: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        taints: list[dict[str, str]],
    ) -> bool:
        """Create a Node object (no kubelet behind it) unless one of that name exists;
        True when created. An existing Node that is not Windows is refused."""
        try:
            existing = self.core.read_node(name)
        except FAILED as error:
            if getattr(error, "status", None) != 404:
                raise _error(f"reading Node {name}", error) from None
        else:
            os_label = (existing.metadata.labels or {}).get("kubernetes.io/os")
            if os_label != "windows":
                raise ClusterError(
                    f"Node {name} exists and is not a Windows node (kubernetes.io/os="
                    f"{os_label}); choose another --name-prefix"
                )
            return False
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
            "spec": {"taints": taints},
        }
        try:
            self.core.create_node(body, field_manager=self.component)
        except FAILED as error:
            if getattr(error, "status", None) == 409:
                return False
            raise _error(f"creating Node {name}", error) from None
        return True

    def delete_node(self, name: str) -> None:
        try:
            self.core.delete_node(name)
        except FAILED as error:
            if getattr(error, "status", None) != 404:
                raise _error(f"deleting Node {name}", error) from None

    def get_plan(self, namespace: str) -> PlanObject:
        config_map = self._read_config_map(PLAN_CONFIGMAP, namespace)
        return PlanObject(exists=False) if config_map is None else _plan_object(config_map)

    def watch_plan(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[PlanObject]:
        for config_map, deleted in self._watch_config_map(
            PLAN_CONFIGMAP, namespace, resource_version, timeout_seconds
        ):
            yield _plan_object(config_map, deleted)

    def get_rollout(self, namespace: str) -> RolloutObject:
        config_map = self._read_config_map(ROLLOUT_CONFIGMAP, namespace)
        return RolloutObject(exists=False) if config_map is None else _rollout_object(config_map)

    def watch_rollout(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[RolloutObject]:
        for config_map, deleted in self._watch_config_map(
            ROLLOUT_CONFIGMAP, namespace, resource_version, timeout_seconds
        ):
            yield _rollout_object(config_map, deleted)

    def _read_config_map(self, name: str, namespace: str) -> Any:
        """The ConfigMap, or None when it does not exist."""
        try:
            return self.core.read_namespaced_config_map(name, namespace)
        except FAILED as error:
            if getattr(error, "status", None) == 404:
                return None
            raise _error(f"reading ConfigMap {namespace}/{name}", error) from None

    def _watch_config_map(
        self, name: str, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[tuple[Any, bool]]:
        """(ConfigMap, deleted) for each change of the ConfigMap ``name``, selected by
        fieldSelector so RBAC can grant it by resourceNames."""
        watch = self.watch_factory()
        with self._lock:
            if self._closed:
                return
            self._watches.add(watch)
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": timeout_seconds,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            for event in watch.stream(self.core.list_namespaced_config_map, namespace, **kwargs):
                kind = event.get("type")
                if kind == "ERROR":
                    raw = event.get("raw_object") or {}
                    code = raw.get("code") if isinstance(raw, dict) else None
                    message = raw.get("message") if isinstance(raw, dict) else str(raw)
                    kind_error = WatchExpiredError if code == 410 else ClusterError
                    raise kind_error(f"watching ConfigMap {name}: {message}", code)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    yield event["object"], kind == "DELETED"
        except ApiException as error:
            raise _error(f"watching ConfigMap {namespace}/{name}", error) from None
        except urllib3.exceptions.HTTPError as error:
            # A dropped connection is a failed watch (the runner lists again), not a crash
            # of the watch thread; after close() it is the end of the watch.
            if self.closed():
                return
            raise ClusterError(f"watching ConfigMap {namespace}/{name}: {error}") from None
        finally:
            with self._lock:
                self._watches.discard(watch)
            watch.stop()

    def get_node(self, name: str) -> NodeObject:
        """The Node as JSON, not as the client's V1Node: building that model costs a few
        milliseconds of CPU per read, which the agent pays twice before it may apply."""
        try:
            node = json.loads(_body(self.core.read_node(name, _preload_content=False)))
        except FAILED as error:
            raise _error(f"reading Node {name}", error) from None
        metadata = node.get("metadata") or {}
        return NodeObject(
            name=name,
            uid=metadata.get("uid"),
            labels=dict(metadata.get("labels") or {}),
            annotations=dict(metadata.get("annotations") or {}),
            taints=tuple((node.get("spec") or {}).get("taints") or []),
        )

    def replace_taints(
        self, name: str, current: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
    ) -> None:
        patch = [
            {"op": "test", "path": "/spec/taints", "value": list(current)},
            {"op": "replace", "path": "/spec/taints", "value": list(taints)},
        ]
        try:
            self.core.patch_node(name, patch, field_manager=FIELD_MANAGER)
        except ApiException as error:
            raise _error(f"removing a taint of Node {name}", error) from None

    def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        metadata: dict[str, Any] = {}
        if labels:
            metadata["labels"] = dict(labels)
        if annotations:
            metadata["annotations"] = dict(annotations)
        if not metadata:
            return
        try:
            # The Node the API server answers with is not needed: not decoded into a model.
            _body(
                self.core.patch_node(
                    name,
                    {"metadata": metadata},
                    field_manager=FIELD_MANAGER,
                    _preload_content=False,
                )
            )
        except FAILED as error:
            raise _error(f"patching Node {name}", error) from None

    def node_event(self, node: NodeObject, reason: str, message: str, warning: bool) -> None:
        """An Event on the Node (``kubectl describe node`` shows it), in ``default`` where
        node events live."""
        now = datetime.datetime.now(datetime.UTC)
        body = kubernetes.client.CoreV1Event(
            metadata=kubernetes.client.V1ObjectMeta(generate_name=f"{node.name}.wcow-agent."),
            involved_object=kubernetes.client.V1ObjectReference(
                api_version="v1", kind="Node", name=node.name, uid=node.uid
            ),
            reason=reason[:128],
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=kubernetes.client.V1EventSource(component=self.component, host=node.name),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.core.create_namespaced_event("default", body)
        except FAILED as error:
            raise _error(f"recording an event on Node {node.name}", error) from None
