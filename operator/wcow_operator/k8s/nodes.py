"""Watch Windows Nodes only (label selector on the server), for the fields that matter.

kopf would watch every Node of the cluster and receive every status heartbeat; this watch
asks the API server for ``kubernetes.io/os=windows`` nodes and wakes the controller only when
an agent's report or a ready label changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from wcow_operator.api.agent_status import AGENT_STATUS_ANNOTATION
from wcow_operator.api.v1alpha1 import READY_LABEL_PREFIX
from wcow_operator.k8s.api import WINDOWS_NODES

log = logging.getLogger(__name__)
WATCH_SECONDS = 300


def node_view(metadata: dict[str, Any]) -> tuple[Any, ...]:
    """What the controller reads from a Node: ready labels and the agent's report."""
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return (
        tuple(sorted((k, v) for k, v in labels.items() if k.startswith(READY_LABEL_PREFIX))),
        annotations.get(AGENT_STATUS_ANNOTATION),
    )


def watch_windows_nodes(
    api_client: client.ApiClient, trigger: Callable[[], None], stop: threading.Event
) -> None:
    """List, then watch from that version; start over on expiry (410) or any error."""
    core = client.CoreV1Api(api_client)
    seen: dict[str, tuple[Any, ...]] = {}
    while not stop.is_set():
        try:
            listed: Any = core.list_node(label_selector=WINDOWS_NODES, _request_timeout=60)
            current = {str(n.metadata.name): node_view(_metadata(n)) for n in listed.items}
            if current != seen:
                seen = current
                trigger()
            stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
            for event in stream.stream(
                core.list_node,
                label_selector=WINDOWS_NODES,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_SECONDS + 30,
            ):
                if stop.is_set():
                    stream.stop()
                    break
                metadata = event["raw_object"].get("metadata", {})
                name = metadata.get("name", "")
                if event["type"] == "DELETED":
                    seen.pop(name, None)
                    trigger()
                elif seen.get(name) != (view := node_view(metadata)):
                    seen[name] = view
                    trigger()
        except ApiException as error:
            if error.status != 410:
                log.warning("watching Windows nodes: %s %s; retrying", error.status, error.reason)
                stop.wait(5)
        except Exception as error:  # noqa: BLE001 - a watch must survive any transport error
            log.warning("watching Windows nodes: %s; retrying", error)
            stop.wait(5)


def _metadata(node: Any) -> dict[str, Any]:
    return {"labels": node.metadata.labels or {}, "annotations": node.metadata.annotations or {}}
