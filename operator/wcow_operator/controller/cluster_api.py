"""The boundary between the controller and the Kubernetes API (implemented in ``k8s``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Scope = Literal["cluster", "namespace"]
# (apiGroup, resource, verb, where it is granted, the object name when RBAC restricts by name)
Permission = tuple[str, str, str, Scope, str | None]


class ApiError(Exception):
    """An API call that failed after retries; ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class WatchExpiredError(Exception):
    """The server no longer has the version a watch asked for (410 Gone): list again."""


@dataclass(frozen=True)
class Watched:
    """A collection the operator keeps in memory (see ``controller.cache``)."""

    kind: Literal["profiles", "runtimeclasses", "plan", "rollout", "nodes"]
    path: str  # the collection's API path
    resource: str  # for metrics and errors
    label_selector: str | None = None
    field_selector: str | None = None
    metadata_only: bool = False  # PartialObjectMetadata: Nodes are large, we read metadata


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None


class ClusterApi(Protocol):
    def list_page(self, watched: Watched, continue_token: str | None, limit: int) -> Page: ...
    def watch(
        self, watched: Watched, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...
    def create_runtime_class(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_runtime_class(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_runtime_class(self, name: str, uid: str) -> None: ...
    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_config_map(
        self, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]: ...
    def patch_profile(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def update_profile_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...
    def get_node(self, name: str) -> dict[str, Any]: ...
    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def list_node_pods(self, node: str) -> list[dict[str, Any]]: ...
    def evict_pod(self, namespace: str, name: str) -> str | None: ...
