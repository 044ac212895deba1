"""What the controller observed, the settings a pass runs with, and the writes that would
make the cluster match the profiles.

Plain data only: the reconcile functions turn an ``Observed`` into an ``Outcome`` of
``Write``s, and the controller executes them through the Kubernetes adapter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from wcow_contract.v1alpha1 import ConditionStatus, Drain

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from wcow_operator.reconcile.drain import DrainProgress, DrainWork
    from wcow_operator.reconcile.nodes import NodeTally
    from wcow_operator.reconcile.rollout_decision import NodeReport, Progress

FINALIZER = "runtime.wcow.dev/cleanup"
CONFIGMAP_LIMIT = 1024 * 1024
# One condition as a step decides it: (status, reason, message).
Row = tuple[ConditionStatus, str, str]


@dataclass(frozen=True)
class ReconcileSettings:
    namespace: str
    require_node_gating: bool = False
    max_unavailable: int | str = "10%"  # the default of profiles that do not set it
    rollout_timeout: timedelta = timedelta(seconds=900)
    drain: Drain = "None"  # the default of profiles that do not set spec.rollout.drain
    allow_evict: bool = True  # the operator's --allow-evict: it may list and evict pods
    plan_warn_bytes: int = CONFIGMAP_LIMIT // 2
    plan_max_bytes: int = CONFIGMAP_LIMIT * 9 // 10


@dataclass(frozen=True)
class ObservedProfile:
    """A WindowsRuntimeProfile as read from the API (``body`` is the raw object)."""

    body: dict[str, Any]

    @property
    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = self.body.get("metadata", {})
        return metadata

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def generation(self) -> int | None:
        generation = self.metadata.get("generation")
        return generation if isinstance(generation, int) else None

    @property
    def deleting(self) -> bool:
        return self.metadata.get("deletionTimestamp") is not None

    @property
    def finalizers(self) -> list[str]:
        return list(self.metadata.get("finalizers") or [])

    @property
    def status(self) -> dict[str, Any]:
        status = self.body.get("status")
        return status if isinstance(status, dict) else {}


@dataclass(frozen=True)
class ObservedNode:
    name: str
    labels: dict[str, str]  # the runtime.wcow.dev/ ready labels
    agent_status: str | None  # the raw runtime.wcow.dev/agent-status annotation
    build: str | None = None  # the kubelet's node.kubernetes.io/windows-build label
    cordoned: bool = False  # carries the operator's cordon annotation (reconcile.drain)


@dataclass(frozen=True)
class Observed:
    profiles: list[ObservedProfile]
    runtime_classes: dict[str, dict[str, Any]]  # by name, raw objects
    plan: dict[str, Any] | None  # the plan in the ConfigMap, None when absent or unreadable
    plan_config_map: dict[str, Any] | None  # the raw ConfigMap, None when absent
    nodes: list[ObservedNode]
    # Per-handler node counts kept up to date node by node (the controller's cache); when
    # None they are counted from ``nodes``.
    tally: NodeTally | None = None
    rollout_config_map: dict[str, Any] | None = None  # the raw rollout ConfigMap
    # The nodes' plan reports by node name (the cache's); None: read from ``nodes``.
    reports: Mapping[str, NodeReport] | None = None
    # Nodes carrying the operator's cordon annotation (reconcile.drain.CORDONED_BY).
    cordoned: frozenset[str] = frozenset()
    # What the drainer last found on each draining node (the controller's memory).
    drains: Mapping[str, DrainProgress] | None = None


WriteKind = Literal[
    "write-rollout",
    "create-runtime-class",
    "replace-runtime-class",
    "recreate-runtime-class",
    "write-plan",
    "delete-runtime-class",
    "remove-finalizer",
    "update-status",
]

# Writes run phase by phase, a phase's writes in parallel (the plan or the rollout first,
# so that one large write overlaps the many small ones instead of holding up the pool).
# A failed plan write stops the writes after it that need it (``after_plan``): the rollout
# that permits it, and the finalizer of earlier versions, never removed while the profile's
# handler is still in the plan. A status follows its RuntimeClass write (it tells whether
# that failed) and the plan (it says the handler is in it).
PHASES: tuple[tuple[WriteKind, ...], ...] = (
    ("write-plan", "create-runtime-class", "replace-runtime-class", "recreate-runtime-class"),
    ("write-rollout", "delete-runtime-class", "remove-finalizer", "update-status"),
)


@dataclass(frozen=True)
class Write:
    """One change to make. ``target`` names the object; ``body`` is what to send."""

    kind: WriteKind
    target: str
    body: dict[str, Any] = field(default_factory=dict)
    # For replace/recreate/delete: the observed object (resourceVersion, uid preconditions).
    observed: dict[str, Any] | None = None
    after_plan: bool = False  # only if the plan write in this pass succeeded (or none was due)
    # A status write: what to write instead when this pass's write of the profile's
    # RuntimeClass fails, given the error and the time (None: nothing, the status already
    # says so). Decided by reconcile (``profile_status``); the controller only picks it.
    if_runtime_class_failed: Callable[[Exception, datetime], Write | None] | None = field(
        default=None, compare=False, repr=False
    )


@dataclass(frozen=True)
class EventNote:
    """A Kubernetes Event about a profile (posted only when something changed)."""

    profile: str
    uid: str
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    # Posted only if this write (kind, target) succeeded in the pass; None: always.
    after: tuple[str, str] | None = None


def profile_event(
    profile: ObservedProfile,
    type_: Literal["Normal", "Warning"],
    reason: str,
    message: str,
    after: tuple[str, str] | None = None,
) -> EventNote:
    """An Event about ``profile`` (see ``EventNote``)."""
    return EventNote(profile.name, profile.uid, type_, reason, message, after)


@dataclass(frozen=True)
class Outcome:
    writes: list[Write]
    events: list[EventNote]
    statuses: dict[str, dict[str, Any]]  # profile -> desired status (written or not)
    plan: dict[str, Any]
    plan_bytes: int
    rollout: Progress | None = None
    drain: DrainWork | None = None  # the drainer's work after this pass
