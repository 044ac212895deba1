"""What the agent needs from Kubernetes: the plan and rollout ConfigMaps and its own Node.

``kubernetes_cluster.py`` implements this with the official client (the only module that
imports it); tests use a fake of this interface. RBAC needed (``wcow_operator.rbac``
AGENT_*_RULES): configmaps get/list/watch in the plan's namespace (the plan and the rollout,
by name), nodes get/patch, events create.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wcow_contract.wire.uninstall import CANARY_REQUEST_ANNOTATION

FIELD_MANAGER = "wcow-agent"
__all__ = ["CANARY_REQUEST_ANNOTATION", "FIELD_MANAGER"]


class ClusterError(RuntimeError):
    """The API server refused or could not be reached; ``status`` is the HTTP code."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WatchExpiredError(ClusterError):
    """410 Gone: the watch's resourceVersion is too old; list again."""


@dataclass(frozen=True)
class PlanObject:
    """The plan ConfigMap as last seen: ``text`` of key ``plan.json``; ``exists`` False
    when the ConfigMap is absent (or was deleted); ``paced`` when the operator marked it
    ``runtime.wcow.dev/rollout: paced`` (change only with the rollout's permission)."""

    exists: bool
    text: str | None = None
    resource_version: str | None = None
    paced: bool = False
    uninstall: str | None = None
    """``runtime.wcow.dev/uninstall`` (``wcow-operator uninstall``): the agents clean their
    nodes and stay idle."""
    announced_hash: str | None = None
    """The hash the operator wrote beside the plan (``runtime.wcow.dev/plan-hash``): only a
    hint of which plan this is (when the loop wakes), never trusted for what it applies."""


@dataclass(frozen=True)
class RolloutObject:
    """The rollout ConfigMap (``wcow-runtime-rollout``) as last seen: ``text`` of key
    ``rollout.json``; ``exists`` False when absent."""

    exists: bool
    text: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class NodeObject:
    name: str
    uid: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()


class Cluster(Protocol):
    def get_plan(self, namespace: str) -> PlanObject: ...

    def watch_plan(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[PlanObject]:
        """Changes of the plan ConfigMap until the timeout; raises WatchExpiredError."""
        ...

    def get_rollout(self, namespace: str) -> RolloutObject: ...

    def watch_rollout(
        self, namespace: str, resource_version: str | None, timeout_seconds: int
    ) -> Iterator[RolloutObject]:
        """Changes of the rollout ConfigMap until the timeout; raises WatchExpiredError."""
        ...

    def get_node(self, name: str) -> NodeObject: ...

    def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        """Merge-patch labels and annotations of one Node (None removes a key)."""
        ...

    def replace_taints(
        self, name: str, current: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
    ) -> None:
        """Set the Node's taints to ``taints`` if they are still ``current`` (a JSON patch
        with a test: a taint someone added meanwhile is not lost)."""
        ...

    def node_event(self, node: NodeObject, reason: str, message: str, warning: bool) -> None: ...
