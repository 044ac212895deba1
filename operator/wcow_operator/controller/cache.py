"""What the operator knows of the cluster, kept in memory and fed by watches.

A reconcile pass reads this cache, never the API server: the API server sees the watches
and the operator's writes, not periodic lists. Four kinds are kept, each only with what the
controller reads: profiles and RuntimeClasses whole (they are small), the plan ConfigMap,
and of each Windows Node its ready labels, its kubelet's build label, its agent's report
and whether the operator cordoned it,
parsed once when the node changes (so a pass costs no JSON parsing per node and profile).

Read your own writes: the controller records each object it wrote (the API server's answer)
here at once. A watch event older than that write (a lower resourceVersion) is then ignored
until the watch catches up, so a pass never undoes a write from a stale view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal

from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_LABEL
from wcow_contract.labels import READY_LABEL_PREFIX
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_operator.reconcile.drain import CORDONED_BY, CORDONED_BY_VALUE
from wcow_operator.reconcile.model import Observed, ObservedNode, ObservedProfile
from wcow_operator.reconcile.nodes import Contribution, NodeTally, contribution
from wcow_operator.reconcile.rollout_decision import NodeReport

Kind = Literal["profiles", "runtimeclasses", "plan", "rollout", "nodes"]
KINDS: tuple[Kind, ...] = ("profiles", "runtimeclasses", "plan", "rollout", "nodes")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def _version(obj: dict[str, Any]) -> int | None:
    """The resourceVersion as a number where it is one (etcd's revisions are); None
    otherwise, and then no ordering is assumed."""
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _read_labels(labels: dict[str, str]) -> dict[str, str]:
    """The Node labels the controller reads: the ready labels and the kubelet's build."""
    return {k: v for k, v in labels.items() if k.startswith(READY_LABEL_PREFIX)} | (
        {WINDOWS_BUILD_LABEL: labels[WINDOWS_BUILD_LABEL]} if WINDOWS_BUILD_LABEL in labels else {}
    )


def observed_node(obj: dict[str, Any]) -> ObservedNode:
    """A Node (full or metadata only) as the controller reads it."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return ObservedNode(
        name=str(metadata.get("name", "")),
        labels={k: v for k, v in labels.items() if k.startswith(READY_LABEL_PREFIX)},
        agent_status=annotations.get(AGENT_STATUS_ANNOTATION),
        build=labels.get(WINDOWS_BUILD_LABEL),
        cordoned=annotations.get(CORDONED_BY) == CORDONED_BY_VALUE,
    )


def kept(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of an object: never managedFields (they can outweigh the rest),
    and of a Node only its name, version, ready and build labels and agent report. Applied to
    each item as it arrives, so a list of thousands of Nodes is never held whole."""
    metadata = obj.get("metadata") or {}
    if kind == "nodes":
        annotations = metadata.get("annotations") or {}
        slim: dict[str, Any] = {
            "name": metadata.get("name"),
            "resourceVersion": metadata.get("resourceVersion"),
            "labels": _read_labels(metadata.get("labels") or {}),
            "annotations": {
                k: v for k, v in annotations.items() if k in (AGENT_STATUS_ANNOTATION, CORDONED_BY)
            },
        }
        return {"metadata": slim}
    if "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


class ClusterCache:
    """Thread-safe: watches write from their threads, the reconciler reads a snapshot."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Kind, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        # Nodes: what each contributes to the per-handler counts, and the running counts.
        self._nodes: dict[str, tuple[ObservedNode, Contribution]] = {}
        self._tally = NodeTally()
        self._floors: dict[tuple[Kind, str], int] = {}  # (kind, name) -> our write's version
        self._synced: dict[Kind, threading.Event] = {k: threading.Event() for k in KINDS}
        self.on_change = on_change  # asks for a reconcile pass
        # asks for the rollout decision at once: a node's report changed (it may have freed
        # its slot in a paced rollout, or failed it)
        self.on_report: Callable[[], None] = lambda: None

    # -- fed by the watches ----------------------------------------------------------------

    def replace(self, kind: Kind, items: Iterable[dict[str, Any]]) -> None:
        """A full list (on start, or after the watch expired): the truth for this kind."""
        fresh = {str(obj["metadata"]["name"]): obj for obj in items}
        with self._lock:
            changed = not self._synced[kind].is_set()
            if kind == "nodes":
                for name in set(self._nodes) - set(fresh):
                    changed |= self._store(kind, name, None)
                for name, obj in fresh.items():
                    changed |= self._store(kind, name, obj)
            else:
                changed |= self._differs(kind, fresh)
                self._objects[kind] = fresh
            # A list is at least as new as any write we made before it.
            self._floors = {key: v for key, v in self._floors.items() if key[0] != kind}
            self._synced[kind].set()
        if changed:
            self.on_change()

    def apply(self, kind: Kind, event: EventType, obj: dict[str, Any]) -> None:
        """One watch event; triggers a pass when it changed something the controller reads."""
        name = str(obj["metadata"]["name"])
        with self._lock:
            floor = self._floors.get((kind, name))
            version = _version(obj)
            if floor is not None and version is not None:
                if version < floor:
                    return  # older than our own write: the watch has not caught up yet
                del self._floors[(kind, name)]
            before = self._report(kind, name)
            changed = self._store(kind, name, None if event == "DELETED" else obj)
            reported = changed and self._report(kind, name) != before
        if reported:
            self.on_report()
        if changed:
            self.on_change()

    # -- fed by the controller's own writes ------------------------------------------------

    def wrote(self, kind: Kind, obj: dict[str, Any]) -> None:
        """The API server's answer to a write: newer than anything the watch delivered."""
        obj = kept(kind, obj)
        name = str(obj["metadata"]["name"])
        with self._lock:
            version = _version(obj)
            if version is not None:
                self._floors[(kind, name)] = version
            self._store(kind, name, obj)

    def deleted(self, kind: Kind, name: str) -> None:
        with self._lock:
            self._store(kind, name, None)

    # -- read by the reconciler ------------------------------------------------------------

    def synced(self) -> bool:
        return all(event.is_set() for event in self._synced.values())

    def observe(self, plan_config_map: str, rollout_config_map: str = "") -> Observed:
        with self._lock:
            profiles = [ObservedProfile(p) for _, p in sorted(self._objects["profiles"].items())]
            runtime_classes = dict(self._objects["runtimeclasses"])
            config_map = self._objects["plan"].get(plan_config_map)
            rollout = self._objects["rollout"].get(rollout_config_map)
            tally = self._tally.copy()
            reports = {
                name: part.report
                for name, (_, part) in self._nodes.items()
                if part.report is not None
            }
            cordoned = frozenset(name for name, (node, _) in self._nodes.items() if node.cordoned)
        return Observed(
            profiles=profiles,
            runtime_classes=runtime_classes,
            plan=None,  # decoded by the controller, which owns the plan format
            plan_config_map=config_map,
            nodes=[],  # counted already: see tally
            tally=tally,
            rollout_config_map=rollout,
            reports=reports,
            cordoned=cordoned,
        )

    def profile_bodies(self) -> list[dict[str, Any]]:
        """The profiles as last seen (read by the admission webhook for every pod)."""
        with self._lock:
            return list(self._objects["profiles"].values())

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                kind: len(self._nodes) if kind == "nodes" else len(self._objects[kind])
                for kind in KINDS
            }

    # -- internals (lock held) -------------------------------------------------------------

    def _report(self, kind: Kind, name: str) -> NodeReport | None:
        entry = self._nodes.get(name) if kind == "nodes" else None
        return entry[1].report if entry is not None else None

    def _store(self, kind: Kind, name: str, obj: dict[str, Any] | None) -> bool:
        if kind == "nodes":
            old = self._nodes.get(name)
            node = observed_node(obj) if obj is not None else None
            if old is not None and old[0] == node:
                return False  # heartbeats and other labels do not concern the controller
            if old is not None:
                self._tally.remove(name, old[1])
                del self._nodes[name]
            if node is not None:
                part = contribution(node)  # the agent's report is parsed here, once
                self._tally.add(name, part)
                self._nodes[name] = (node, part)
            return True
        store = self._objects[kind]
        if obj is None:
            return store.pop(name, None) is not None
        before = store.get(name)
        store[name] = obj
        return before is None or _content(before) != _content(obj)

    def _differs(self, kind: Kind, fresh: dict[str, dict[str, Any]]) -> bool:
        old = self._objects[kind]
        return old.keys() != fresh.keys() or any(
            _content(old[n]) != _content(fresh[n]) for n in fresh
        )


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """The object less what changes on every write without meaning anything to us."""
    metadata = {
        k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion",)
    }
    return {**obj, "metadata": metadata}
