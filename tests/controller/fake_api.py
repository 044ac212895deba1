"""An in-memory Kubernetes API at the controller's boundary (``ClusterApi``).

It keeps resourceVersions and refuses stale replaces (409), honours finalizers and delete
preconditions, garbage-collects RuntimeClasses whose controller owner is gone, records every
call, and fails chosen calls on demand.
"""

from __future__ import annotations

import copy
import itertools
from collections import defaultdict
from typing import Any

from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.reconcile.model import Observed

READS = {"list_page", "watch"}


class FakeApi:
    def __init__(self) -> None:
        self.profiles: dict[str, dict[str, Any]] = {}
        self.runtime_classes: dict[str, dict[str, Any]] = {}
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self._failures: dict[str, list[ApiError]] = defaultdict(list)
        self._versions = itertools.count(100)
        self._uids = itertools.count(1)

    # -- test helpers ----------------------------------------------------------------------

    def fail(self, method: str, status: int, times: int = 1) -> None:
        self._failures[method] += [ApiError(status, "Injected", f"{method} failed")] * times

    def writes(self) -> list[str]:
        return [c for c in self.calls if c not in READS]

    def apply_profile(self, body: dict[str, Any]) -> dict[str, Any]:
        """kubectl apply: create, or update spec (bumping generation when it changed)."""
        name = body["metadata"]["name"]
        current = self.profiles.get(name)
        if current is None:
            stored = copy.deepcopy(body)
            stored["metadata"].update(
                uid=f"uid-{next(self._uids)}", generation=1, resourceVersion=self._rv()
            )
            self.profiles[name] = stored
            return stored
        if current["spec"] != body["spec"]:
            current["spec"] = copy.deepcopy(body["spec"])
            current["metadata"]["generation"] += 1
            current["metadata"]["resourceVersion"] = self._rv()
        return current

    def delete_profile(self, name: str) -> None:
        body = self.profiles[name]
        if body["metadata"].get("finalizers"):
            body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            body["metadata"]["resourceVersion"] = self._rv()
        else:
            self._gone(name)

    def plan(self, namespace: str = "wcow-system") -> dict[str, Any] | None:
        import json

        config_map = self.config_maps.get((namespace, "wcow-runtime-plan"))
        return json.loads(config_map["data"]["plan.json"]) if config_map else None

    # -- ClusterApi ------------------------------------------------------------------------

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        if self._failures[method]:
            raise self._failures[method].pop(0)

    def _rv(self) -> str:
        return str(next(self._versions))

    def _gone(self, name: str) -> None:
        body = self.profiles.pop(name)
        uid = body["metadata"]["uid"]
        for rc_name, rc in list(self.runtime_classes.items()):  # garbage collector
            if any(r.get("uid") == uid for r in rc["metadata"].get("ownerReferences", [])):
                del self.runtime_classes[rc_name]

    def create_runtime_class(self, body: dict[str, Any]) -> dict[str, Any]:
        self._enter("create_runtime_class")
        name = body["metadata"]["name"]
        if name in self.runtime_classes:
            raise ApiError(409, "AlreadyExists", f"runtimeclasses {name} already exists")
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=f"rc-uid-{next(self._uids)}", resourceVersion=self._rv())
        self.runtime_classes[name] = stored
        return copy.deepcopy(stored)

    def replace_runtime_class(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._enter("replace_runtime_class")
        current = self.runtime_classes.get(name)
        if current is None:
            raise ApiError(404, "NotFound", name)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if body["handler"] != current["handler"]:
            raise ApiError(422, "Invalid", "handler: field is immutable")
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=current["metadata"]["uid"], resourceVersion=self._rv())
        self.runtime_classes[name] = stored
        return copy.deepcopy(stored)

    def delete_runtime_class(self, name: str, uid: str) -> None:
        self._enter("delete_runtime_class")
        current = self.runtime_classes.get(name)
        if current is None:
            return
        if current["metadata"]["uid"] != uid:
            raise ApiError(409, "Conflict", "precondition failed: UID mismatch")
        del self.runtime_classes[name]

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._enter("create_config_map")
        key = (namespace, body["metadata"]["name"])
        if key in self.config_maps:
            raise ApiError(409, "AlreadyExists", "configmap exists")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = self._rv()
        self.config_maps[key] = stored
        return copy.deepcopy(stored)

    def replace_config_map(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._enter("replace_config_map")
        current = self.config_maps[(namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = self._rv()
        self.config_maps[(namespace, name)] = stored
        return copy.deepcopy(stored)

    def patch_profile(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._enter("patch_profile")
        current = self.profiles[name]
        wanted_rv = patch["metadata"].get("resourceVersion")
        if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        current["metadata"]["finalizers"] = list(patch["metadata"]["finalizers"])
        current["metadata"]["resourceVersion"] = self._rv()
        if current["metadata"].get("deletionTimestamp") and not current["metadata"]["finalizers"]:
            self._gone(name)
            return {}
        return copy.deepcopy(current)

    def update_profile_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A PUT of the status subresource: conditional on resourceVersion (and uid when
        given); only the status is taken from the body."""
        self._enter("update_profile_status")
        current = self.profiles[name]
        wanted = body["metadata"]
        if wanted.get("resourceVersion") != current["metadata"]["resourceVersion"] or (
            wanted.get("uid") not in (None, current["metadata"].get("uid"))
        ):
            raise ApiError(409, "Conflict", "the object has been modified")
        current["status"] = copy.deepcopy(body["status"])
        current["metadata"]["resourceVersion"] = self._rv()
        return copy.deepcopy(current)

    def get_node(self, name: str) -> dict[str, Any]:
        self._enter("get_node")
        return copy.deepcopy(self._node(name))

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of the annotations and ``spec`` (what the drainer sends)."""
        self._enter("patch_node")
        node = self._node(name)
        metadata = node.setdefault("metadata", {})
        annotations = metadata.setdefault("annotations", {})
        for key, value in (patch.get("metadata") or {}).get("annotations", {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        spec = node.setdefault("spec", {})
        for key, value in (patch.get("spec") or {}).items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        metadata["resourceVersion"] = self._rv()
        return copy.deepcopy(node)

    def _node(self, name: str) -> dict[str, Any]:
        found = next((n for n in self.nodes if n["metadata"]["name"] == name), None)
        if found is None:
            raise ApiError(404, "NotFound", f"nodes {name!r} not found")
        return found

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self._enter("create_event")
        self.events.append(copy.deepcopy(body))


class RelistingCache(ClusterCache):
    """The controller's cache as if its watches were never behind: every ``observe`` takes
    the fake's current state (through ``replace``, as a relist would)."""

    def __init__(self, api: FakeApi, namespace: str) -> None:
        super().__init__()
        self.api = api
        self.namespace = namespace
        self._relist()

    def observe(self, plan_config_map: str, rollout_config_map: str = "") -> Observed:
        self._relist()
        return super().observe(plan_config_map, rollout_config_map)

    def _relist(self) -> None:
        api = self.api
        self.replace("profiles", copy.deepcopy(list(api.profiles.values())))
        self.replace("runtimeclasses", copy.deepcopy(list(api.runtime_classes.values())))
        config_maps = [cm for (ns, _), cm in api.config_maps.items() if ns == self.namespace]
        self.replace("plan", copy.deepcopy(config_maps))
        self.replace("rollout", copy.deepcopy(config_maps))
        self.replace("nodes", copy.deepcopy(api.nodes))
