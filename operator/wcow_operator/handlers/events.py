"""kopf watches what the controller depends on; every relevant change triggers a pass.

The handlers do no work themselves (the controller re-reads and reconciles everything in
one batch), so they are cheap, never block the event loop, and keep no progress state on
the objects (``on.event`` handlers store nothing in annotations or status).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from wcow_operator.api.v1alpha1 import GROUP, PLURAL, VERSION


def register(registry: kopf.OperatorRegistry, trigger: Callable[[], None]) -> None:
    """Register the watches on ``registry``; ``trigger`` asks for a reconcile pass.
    (Windows Nodes are watched by ``wcow_operator.k8s.nodes`` with a server-side selector.)"""

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def profile_changed(**_: Any) -> None:
        trigger()

    @kopf.on.event("node.k8s.io", "v1", "runtimeclasses", registry=registry)
    async def runtime_class_changed(**_: Any) -> None:
        trigger()  # drift: edited or deleted by hand
