"""kopf watches what the controller depends on; every relevant change triggers a pass.

The handlers do no work themselves (the controller re-reads and reconciles everything in
one batch), so they are cheap, never block the event loop, and keep no progress state on
the objects (``on.event`` handlers store nothing in annotations or status).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from wcow_operator.api.agent_status import AGENT_STATUS_ANNOTATION
from wcow_operator.api.v1alpha1 import GROUP, PLURAL, READY_LABEL_PREFIX, VERSION


def _node_view(body: Any) -> tuple[Any, ...]:
    metadata = body.get("metadata", {})
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return (
        labels.get("kubernetes.io/os"),
        tuple(sorted((k, v) for k, v in labels.items() if k.startswith(READY_LABEL_PREFIX))),
        annotations.get(AGENT_STATUS_ANNOTATION),
    )


def register(registry: kopf.OperatorRegistry, trigger: Callable[[], None]) -> None:
    """Register the watches on ``registry``; ``trigger`` asks for a reconcile pass."""
    seen_nodes: dict[str, tuple[Any, ...]] = {}

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def profile_changed(**_: Any) -> None:
        trigger()

    @kopf.on.event("node.k8s.io", "v1", "runtimeclasses", registry=registry)
    async def runtime_class_changed(**_: Any) -> None:
        trigger()  # drift: edited or deleted by hand

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_changed(body: kopf.Body, type: str | None, **_: Any) -> None:  # noqa: A002
        # Nodes change often (conditions, images); only agent reports and labels matter.
        name = body.get("metadata", {}).get("name", "")
        view = _node_view(body)
        if type == "DELETED":
            seen_nodes.pop(name, None)
            if view[0] == "windows":
                trigger()
            return
        if seen_nodes.get(name) != view:
            seen_nodes[name] = view
            if view[0] == "windows":
                trigger()
