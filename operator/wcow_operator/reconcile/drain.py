"""Drain before a restart: the pure decisions (``spec.rollout.drain``).

The operator drains a node *before* it lets the node change: a node picked for the change
goes first into the rollout's ``draining`` (it counts against maxUnavailable but may not
change yet); the controller's drainer cordons it (and with Evict evicts the changed
classes' pods and waits until they are gone) and says so; the next pass moves it to
``permitted``. A drain that is not done within its timeout fails the node's turn with reason
``DrainTimeout``; it is charged to the profiles whose pods are still there (a tenant's pod
that a PodDisruptionBudget protects holds back its own class's change, named in that
profile's status, and nobody else's), and halts the rollout only when it cannot be charged
to any (the drain never started, or the API refused it). A node is uncordoned once it is
no longer draining or applying (applied, failed, rolled back, halted, or the change is gone),
and only if the operator cordoned it (the annotation ``runtime.wcow.dev/cordoned-by``): a node
someone else made unschedulable is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from wcow_contract.conditions import timestamp
from wcow_contract.v1alpha1 import (
    DRAIN_ORDER,
    DRAIN_TIMEOUT_DEFAULT,
    Drain,
    LabelSelector,
    NodeFailure,
)

CORDONED_BY: Final = "runtime.wcow.dev/cordoned-by"
CORDONED_BY_VALUE: Final = "wcow-operator"
MAX_NAMED = 5  # pods named in a DrainTimeout message
DRAIN_TIMEOUT: Final = "DrainTimeout"


@dataclass(frozen=True)
class DrainOrder:
    """What to do to a node before it may change: the strongest drain of the changed
    profiles, and with Evict the RuntimeClasses whose pods leave (each with its profile's
    pod selector; None: every pod of the class)."""

    mode: Drain
    timeout: timedelta = timedelta(seconds=DRAIN_TIMEOUT_DEFAULT)
    evict: Mapping[str, LabelSelector | None] = field(default_factory=dict)
    handlers: Mapping[str, str] = field(default_factory=dict)
    """RuntimeClass -> the handler of its profile, for the classes evicted: a drain that
    times out on a class's pods is charged to that handler."""


@dataclass(frozen=True)
class DrainProgress:
    """What the drainer last found on a node: done, or what still holds it up."""

    done: bool
    waiting_for: str = ""
    blocking: tuple[str, ...] = ()
    """The RuntimeClasses whose pods are still on the node (what holds the drain up)."""


@dataclass(frozen=True)
class ProfileDrain:
    """One changed profile's say: its RuntimeClass and its rollout drain settings."""

    runtime_class: str
    mode: Drain | None
    timeout_seconds: int | None = None
    selector: LabelSelector | None = None
    handler: str | None = None


def drain_order(
    profiles: Iterable[ProfileDrain], default: Drain, *, unclaimed: bool = False
) -> DrainOrder:
    """The strongest drain among the changed profiles (Evict > Cordon > None); the longest
    of their timeouts; with Evict, the classes of the profiles that ask for it. ``unclaimed``:
    the change also removes handlers no live profile claims (deleted profiles): the default
    drain counts for them (their RuntimeClasses are gone, so no pod is evicted for them)."""
    chosen = list(profiles)
    modes = {p.mode or default for p in chosen} | ({default} if unclaimed else set())
    mode: Drain = next((m for m in DRAIN_ORDER if m in modes), "None")
    evicting = [p for p in chosen if (p.mode or default) == "Evict"]
    seconds = max(
        (p.timeout_seconds or DRAIN_TIMEOUT_DEFAULT for p in evicting),
        default=DRAIN_TIMEOUT_DEFAULT,
    )
    return DrainOrder(
        mode=mode,
        timeout=timedelta(seconds=seconds),
        evict={
            p.runtime_class: p.selector for p in sorted(evicting, key=lambda p: p.runtime_class)
        },
        handlers={p.runtime_class: p.handler for p in evicting if p.handler is not None},
    )


@dataclass(frozen=True)
class Turn:
    """One pass's drain decisions for the rollout (``reconcile.rollout_decision.decide``).
    ``order`` None: no drain asked, or the rollout is halted: nobody moves."""

    order: DrainOrder | None
    progress: Mapping[str, DrainProgress]
    now: datetime

    def blamed(self, node: str) -> frozenset[str]:
        """The handlers whose pods hold up ``node``'s drain (none known: empty)."""
        seen = self.progress.get(node)
        if self.order is None or seen is None:
            return frozenset()
        return frozenset(self.order.handlers[c] for c in seen.blocking if c in self.order.handlers)

    def settle(
        self,
        draining: Mapping[str, str],
        reports: Container[str],
        permitted: dict[str, str],
        failures: list[NodeFailure],
    ) -> tuple[dict[str, str], list[NodeFailure]]:
        """The nodes still draining, and the failures with those whose drain timed out
        (``DrainTimeout``); a node whose drain is done moves to ``permitted``."""
        still = {n: t for n, t in draining.items() if n in reports and n not in permitted}
        if self.order is None:
            return still, failures
        stuck: list[NodeFailure] = []
        for node, began in sorted(still.items()):
            seen = self.progress.get(node)
            if self.order.mode == "None" or (seen is not None and seen.done):
                permitted[node] = timestamp(self.now)
                del still[node]
            elif self.now - _time(began) > self.order.timeout:
                del still[node]
                stuck.append(self._timed_out(node, seen))
        return still, sorted([*failures, *stuck], key=lambda f: f.node)

    def _timed_out(self, node: str, seen: DrainProgress | None) -> NodeFailure:
        why = seen.waiting_for if seen is not None else "the drain did not start"
        seconds = int(self.order.timeout.total_seconds()) if self.order else 0
        return NodeFailure(
            node=node,
            reason=DRAIN_TIMEOUT,
            message=f"not drained within {seconds} s: {why}"[:1024],
        )

    def admit(
        self,
        permitted: dict[str, str],
        draining: dict[str, str],
        permit: Callable[[dict[str, str]], None],
    ) -> None:
        """Let nodes in as ``permit`` paces them, draining nodes counted busy: straight to
        ``permitted`` when no drain is asked, else to ``draining`` first."""
        granted = {**permitted, **draining}
        permit(granted)
        fresh = {n: t for n, t in granted.items() if n not in permitted and n not in draining}
        drains = self.order is not None and self.order.mode != "None"
        (draining if drains else permitted).update(fresh)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def to_uncordon(
    cordoned: Iterable[str],
    draining: Mapping[str, str],
    permitted: Mapping[str, str],
    busy: Callable[[str], bool],
) -> list[str]:
    """Nodes the operator cordoned that no longer need it: not draining, and not permitted
    and still applying (``busy``): applied, failed, rolled back, halted or gone from the
    change."""
    return sorted(n for n in cordoned if n not in draining and not (n in permitted and busy(n)))


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether a pod's labels match a meta/v1 LabelSelector (None or empty: every pod)."""
    if selector is None:
        return True
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        present = requirement.key in labels
        value = labels.get(requirement.key, "")
        values = requirement.values or []
        match requirement.operator:
            case "In":
                ok = present and value in values
            case "NotIn":
                ok = not present or value not in values
            case "Exists":
                ok = present
            case "DoesNotExist":
                ok = not present
        if not ok:
            return False
    return True


def pods_to_evict(pods: Iterable[Mapping[str, Any]], order: DrainOrder) -> list[Mapping[str, Any]]:
    """The node's pods that must leave before it restarts: running (not finished) pods of a
    class being evicted, matching that class's selector."""
    chosen = []
    for pod in pods:
        spec = pod.get("spec") or {}
        runtime_class = spec.get("runtimeClassName")
        if not isinstance(runtime_class, str) or runtime_class not in order.evict:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # finished: nothing runs under the old handler
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if selects(order.evict[runtime_class], labels):
            chosen.append(pod)
    return chosen


def pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def blocking(pods: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The RuntimeClasses of the pods still on a node, sorted (what its drain waits on)."""
    return tuple(sorted({str((p.get("spec") or {}).get("runtimeClassName")) for p in pods}))


def waiting_for(left: list[str], refusals: list[str]) -> str:
    """Why a node is not drained yet, for the DrainTimeout message: the pods still there and
    what refused their eviction (a PodDisruptionBudget's own words)."""
    named = ", ".join(left[:MAX_NAMED]) + (
        f" and {len(left) - MAX_NAMED} more" if len(left) > MAX_NAMED else ""
    )
    text = f"{len(left)} pod(s) still on the node: {named}"
    if refusals:
        text += "; eviction refused: " + "; ".join(refusals[:MAX_NAMED])
    return text


@dataclass(frozen=True)
class DrainWork:
    """What the controller's drainer does after this pass: drain these nodes (each pass
    until done: cordon, evict, look again) and uncordon those."""

    order: DrainOrder
    drain: tuple[str, ...] = ()
    uncordon: tuple[str, ...] = ()
