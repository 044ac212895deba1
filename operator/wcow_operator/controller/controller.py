"""One reconcile pass: observe (the watch-fed cache) -> reconcile (pure) -> write, phase by
phase; and the hand-over, the rollout decision alone between passes. ``controller.runner``
schedules both."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from wcow_contract.condition_table import CONDITIONS
from wcow_contract.conditions import timestamp
from wcow_contract.text import printable
from wcow_contract.v1alpha1 import API_VERSION, KIND
from wcow_contract.wire.plan import PLAN_CONFIGMAP, PLAN_KEY
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, ROLLOUT_KEY, Rollout, parse_rollout
from wcow_operator.controller.cache import ClusterCache, Kind
from wcow_operator.controller.cluster_api import ApiError, ClusterApi
from wcow_operator.controller.drainer import Drainer
from wcow_operator.controller.metrics import Metrics
from wcow_operator.reconcile.model import (
    FINALIZER,
    PHASES,
    EventNote,
    Observed,
    Outcome,
    ReconcileSettings,
    Write,
)
from wcow_operator.reconcile.profiles import Memo
from wcow_operator.reconcile.reconciler import reconcile
from wcow_operator.reconcile.rollout_decision import next_timeout

log = logging.getLogger(__name__)
EVENT_NAMESPACE = "default"
RUNTIME_CLASS_WRITES = ("create-runtime-class", "replace-runtime-class", "recreate-runtime-class")
# The metric counts every condition a profile carries (the catalogue the docs render).
CONDITION_TYPES = tuple(kind.type for kind in CONDITIONS)


@dataclass
class PassReport:
    writes: int = 0
    errors: list[str] = field(default_factory=list)
    plan_written: bool = False
    # A drain is done or under way: the next pass in this many seconds (None: no drain).
    again_in: float | None = None
    wake_in: float | None = None  # seconds until a pass is due though nothing changes
    # Status writes the API server refused with 409: the profile changed since the watch
    # showed it (the change is on its way to the cache; the next pass writes from it).
    superseded: int = 0


class Controller:
    def __init__(
        self,
        api: ClusterApi,
        cache: ClusterCache,
        settings: ReconcileSettings,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        workers: int = 8,
        instance: str | None = None,
    ) -> None:
        self.api = api
        self.cache = cache
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.workers = workers
        self.instance = instance or socket.gethostname()
        # One pool for every pass: a phase's writes go out in parallel (they are independent
        # by construction), the phases one after another. Its threads idle between passes.
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="writer")
        # What passes worked out per profile: the next redoes only what changed.
        self._memo = Memo()
        self._plans = PlanReader()
        self.drainer = Drainer(
            api, metrics, lambda node: cache.wrote("nodes", node), self._post_node_event
        )

    def close(self) -> None:
        """Let the writes in flight finish; no pass may run after."""
        self._pool.shutdown(wait=True)

    def observe(self) -> Observed:
        """The cluster as the watches last showed it (no API request)."""
        observed = self.cache.observe(PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP)
        plan = self._plans.read(observed.plan_config_map) if observed.plan_config_map else None
        return dataclasses.replace(observed, plan=plan, drains=dict(self.drainer.progress))

    def run_pass(self) -> PassReport:
        started = time.monotonic()
        report = PassReport()
        try:
            outcome = reconcile(self.observe(), self.settings, self.clock(), self._memo)
        except ApiError as error:
            report.errors.append(f"reading the cluster: {error}")
        except Exception as error:  # never let the reconciler thread die; say why and retry
            log.exception("reconcile pass failed")
            report.errors.append(f"reconcile failed: {error!r}")
        else:
            self._execute(outcome, report)
            self._drain(outcome, report)
            self._record(outcome, report)
            report.wake_in = self._next_timeout()
        self.metrics.duration.observe(time.monotonic() - started)
        self.metrics.reconciles.labels(result="error" if report.errors else "success").inc()
        for problem in report.errors:
            log.warning("reconcile: %s", problem)
        return report

    def hand_over(self) -> bool:
        """Only the rollout decision, at once, when a node's report changed: a node that
        finished frees its slot for the next without waiting for a debounced pass (that pass
        follows and writes the statuses; the rollout it computes is then unchanged). Nothing
        is written when the decision is unchanged, or when the plan it is for is not written
        yet (the pass writes the plan first). A halt is left to the pass: a node let in again
        by a resume still shows its old failure until its agent has tried again, which the
        debounce gives it time to report. With ``drain: Cordon`` the hand-over also cordons
        the nodes it put in ``draining`` (and uncordons those done), then lets the cordoned
        ones in with a second write; an eviction is left to the passes (pods leave on their
        own time). True when it wrote the rollout."""
        wrote, cordoned = self._hand_over_write()
        if cordoned:  # the same decision again: the nodes cordoned move to permitted
            self._hand_over_write()
        return wrote

    def _hand_over_write(self) -> tuple[bool, bool]:
        """The rollout write of a hand-over and, with ``drain: Cordon``, the drainer's work
        the same decision holds, once that write is done. (whether the rollout was written,
        whether a cordon is done: a node may be let in now)."""
        try:
            outcome = reconcile(self.observe(), self.settings, self.clock(), self._memo)
        except Exception:  # the pass that follows reports it
            log.debug("rollout hand-over skipped", exc_info=True)
            return False, False
        if any(w.kind == "write-plan" for w in outcome.writes):
            return False, False
        if outcome.rollout is not None and outcome.rollout.halted is not None:
            return False, False
        writes = [w for w in outcome.writes if w.kind == "write-rollout"]
        if not writes:
            return False, False
        report = PassReport()
        self._execute(dataclasses.replace(outcome, writes=writes, events=[]), report)
        if outcome.drain is None or outcome.drain.order.mode != "Cordon":
            return True, False
        self._drain(outcome, report)  # not when the rollout write failed
        return True, report.again_in == 0.0

    def _next_timeout(self) -> float | None:
        """When a permission in the rollout (as written, from memory) times out."""
        config_map = self.cache.observe(PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP).rollout_config_map
        data = (config_map or {}).get("data") or {}
        rollout = parse_rollout(data.get(ROLLOUT_KEY))
        return next_timeout(rollout, self.settings.rollout_timeout, self.clock())

    # -- writes ----------------------------------------------------------------------------

    def _execute(self, outcome: Outcome, report: PassReport) -> None:
        plan_failed = False
        done: set[tuple[str, str]] = set()
        failed_rc: dict[str, Exception] = {}
        for phase in PHASES:
            batch = sorted(
                (w for w in outcome.writes if w.kind in phase), key=lambda w: phase.index(w.kind)
            )
            if plan_failed:
                batch = [w for w in batch if not w.after_plan]
            if "update-status" in phase:
                batch = self._with_failures(batch, failed_rc)
            for write, failure in zip(batch, self._pool.map(self._try, batch), strict=True):
                if _superseded(write, failure):
                    report.superseded += 1
                    continue
                if failure is None:
                    report.writes += 1
                    report.plan_written |= write.kind == "write-plan"
                    done.add((write.kind, write.target))
                    continue
                report.errors.append(f"{write.kind} {write.target}: {failure}")
                if write.kind in RUNTIME_CLASS_WRITES:
                    failed_rc[write.target] = failure
                if write.kind == "write-plan":
                    plan_failed = True
                    outcome.events.extend(_blocked_cleanups(outcome, failure))
        for note in outcome.events:
            if note.after is None or note.after in done:
                self._post_event(note)

    def _drain(self, outcome: Outcome, report: PassReport) -> None:
        """Drain and uncordon as the pass decided, once the rollout that records the
        draining nodes is written (a failed write: the next pass decides again)."""
        if outcome.drain is None or any(e.startswith("write-rollout") for e in report.errors):
            return
        report.again_in = self.drainer.run(outcome.drain, self._pool)

    def _with_failures(self, batch: list[Write], failed_rc: dict[str, Exception]) -> list[Write]:
        """Where this pass's RuntimeClass write failed, the status write the pass gave for
        that case instead (none: the status says so already)."""
        adjusted = []
        for write in batch:
            failure = failed_rc.get(write.target)
            instead = write.if_runtime_class_failed
            if failure is None or instead is None:
                adjusted.append(write)
            elif (chosen := instead(failure, self.clock())) is not None:
                adjusted.append(chosen)
        return adjusted

    def _try(self, write: Write) -> Exception | None:
        try:
            self._apply(write)
            if write.kind == "write-rollout":
                _log_halt(write)
        except ApiError as error:
            return error
        except Exception as error:  # a bug in one write must not stop the others
            log.exception("%s %s failed", write.kind, write.target)
            return error
        return None

    def _apply(self, write: Write) -> None:
        observed = write.observed or {}
        metadata = observed.get("metadata", {})
        ns = self.settings.namespace
        match write.kind:
            case "remove-finalizer":
                finalizers = [f for f in metadata.get("finalizers") or [] if f != FINALIZER]
                # resourceVersion makes the patch conditional: others' finalizers are kept.
                patched = self.api.patch_profile(
                    write.target,
                    {
                        "metadata": {
                            "finalizers": finalizers,
                            "resourceVersion": metadata.get("resourceVersion"),
                        }
                    },
                )
                self.cache.wrote("profiles", patched)
            case "create-runtime-class":
                self.cache.wrote("runtimeclasses", self.api.create_runtime_class(write.body))
            case "replace-runtime-class":
                replaced = self.api.replace_runtime_class(write.target, write.body)
                self.cache.wrote("runtimeclasses", replaced)
            case "recreate-runtime-class":
                self.api.delete_runtime_class(write.target, metadata["uid"])
                self.cache.deleted("runtimeclasses", write.target)
                self.cache.wrote("runtimeclasses", self.api.create_runtime_class(write.body))
            case "delete-runtime-class":
                self.api.delete_runtime_class(write.target, metadata["uid"])
                self.cache.deleted("runtimeclasses", write.target)
            case "write-plan" | "write-rollout":
                kind: Kind = "plan" if write.kind == "write-plan" else "rollout"
                if write.observed is None:
                    self.cache.wrote(kind, self.api.create_config_map(ns, write.body))
                else:
                    body = {
                        **write.body,
                        "metadata": {
                            **write.body["metadata"],
                            "resourceVersion": metadata["resourceVersion"],
                        },
                    }
                    self.cache.wrote(kind, self.api.replace_config_map(ns, write.target, body))
            case "update-status":
                updated = self.api.update_profile_status(write.target, status_update(write))
                self.cache.wrote("profiles", updated)

    def _post_node_event(self, node: str, type_: str, reason: str, message: str) -> None:
        """An Event about a Node the drainer cordoned, evicted from or uncordoned."""
        involved = {"apiVersion": "v1", "kind": "Node", "name": node}
        self._create_event(node, involved, type_, reason, message)

    def _post_event(self, note: EventNote) -> None:
        involved = {"apiVersion": API_VERSION, "kind": KIND, "name": note.profile, "uid": note.uid}
        self._create_event(note.profile, involved, note.type, note.reason, note.message)

    def _create_event(
        self, name: str, involved: dict[str, str], type_: str, reason: str, message: str
    ) -> None:
        now = timestamp(self.clock())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # The API server requires events about cluster-scoped objects to live in
            # "default" (as client-go's recorder and kopf post them).
            "metadata": {"generateName": f"{name}.", "namespace": EVENT_NAMESPACE},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "wcow-operator"},
            "reportingComponent": "wcow-operator",
            "reportingInstance": self.instance[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.api.create_event(EVENT_NAMESPACE, body)
        except ApiError as error:  # events are best effort
            log.warning("could not post event %s for %s: %s", reason, name, error)

    # -- metrics -------------------------------------------------------------------------

    def _record(self, outcome: Outcome, report: PassReport) -> None:
        counts: dict[tuple[str, str], int] = {}
        for status in outcome.statuses.values():
            for condition in status.get("conditions", []):
                key = (condition["type"], condition["status"])
                counts[key] = counts.get(key, 0) + 1
        for type_ in CONDITION_TYPES:
            for value in ("True", "False", "Unknown"):
                self.metrics.profiles.labels(condition=type_, status=value).set(
                    counts.get((type_, value), 0)
                )
        self.metrics.runtime_classes.set(
            sum(1 for s in outcome.statuses.values() if s.get("runtimeClassName"))
        )
        self.metrics.plan_bytes.set(outcome.plan_bytes)
        self.metrics.plan_limit_ratio.set(outcome.plan_bytes / self.settings.plan_max_bytes)
        self.metrics.plan_handlers.set(len(outcome.plan["handlers"]))
        if outcome.rollout is not None:
            progress = outcome.rollout
            draining = len(outcome.drain.drain) if outcome.drain is not None else 0
            waiting = progress.total - progress.done - progress.applying - progress.failed
            for state, count in (
                ("updated", progress.done),
                ("draining", draining),
                ("applying", progress.applying),
                ("failed", progress.failed),
                ("waiting", max(waiting - draining, 0)),
            ):
                self.metrics.rollout_nodes.labels(state=state).set(count)
            self.metrics.rollout_halted.set(1 if progress.halted is not None else 0)
            self.metrics.rollout_held.set(len(progress.held))
        if report.plan_written:
            self.metrics.plan_last_write.set(time.time())
        if outcome.plan_bytes > self.settings.plan_warn_bytes:
            log.warning(
                "the plan is %d bytes, %.0f%% of the %d-byte limit",
                outcome.plan_bytes,
                100 * outcome.plan_bytes / self.settings.plan_max_bytes,
                self.settings.plan_max_bytes,
            )


class PlanReader:
    """The plan a ConfigMap holds, decoded once per text (273 KB at 500 handlers; every
    hand-over and pass reads it). Only read: the reconciler never changes the observed plan."""

    def __init__(self) -> None:
        self._last: tuple[str | None, dict[str, Any] | None] | None = None

    def read(self, config_map: dict[str, Any]) -> dict[str, Any] | None:
        text = (config_map.get("data") or {}).get(PLAN_KEY)
        if self._last is not None and self._last[0] == text:
            return self._last[1]
        plan = _read_plan(config_map)
        self._last = (text, plan)
        return plan


def _read_plan(config_map: dict[str, Any]) -> dict[str, Any] | None:
    text = (config_map.get("data") or {}).get(PLAN_KEY)
    try:
        plan = json.loads(text) if text else None
    except ValueError:
        log.warning("the plan ConfigMap does not hold JSON; it will be rewritten")
        return None
    return plan if isinstance(plan, dict) else None


def _log_halt(write: Write) -> None:
    """Say once, in the operator's log, that a rollout halted and why: the rollout is written
    only when the decision changes, and a halt stays as it is until a resume or a new plan."""
    new = parse_rollout(write.body["data"].get(ROLLOUT_KEY))
    old = parse_rollout(((write.observed or {}).get("data") or {}).get(ROLLOUT_KEY))
    if new is None:
        return
    _log_holds(new, old)
    halt = new.halted
    if halt is None:
        return
    if old is not None and old.plan_hash == new.plan_hash and old.halted == halt:
        return
    log.warning(
        "rollout of plan %s halted (%s): %s; changed handlers: %s",
        new.plan_hash,
        printable(halt.reason, 128),
        printable(halt.message, 1024),  # names nodes' own reasons: untrusted
        ", ".join(new.changed_handlers) or "none",
    )


def _log_holds(new: Rollout, old: Rollout | None) -> None:
    """Say once that a handler's change is held back: the rollout it halted, and why."""
    before = old.held if old is not None else {}
    for profile, hold in new.held.items():
        if before.get(profile) == hold:
            continue
        kept = hold.entry.get("generation") if hold.entry is not None else None
        log.warning(
            "rollout of plan %s halted (%s): %s; held back: handler %s of profile %s "
            "(generation %s), %s; the new plan %s carries the other changes",
            hold.plan_hash,
            printable(hold.reason, 128),
            printable(hold.message, 1024),  # names nodes' own reasons: untrusted
            hold.handler,
            profile,
            hold.generation,
            f"back to generation {kept}" if kept is not None else "out of the plan",
            new.plan_hash,
        )


def _blocked_cleanups(outcome: Outcome, error: Exception) -> list[EventNote]:
    return [
        EventNote(
            w.target,
            str((w.observed or {}).get("metadata", {}).get("uid", "")),
            "Warning",
            "CleanupBlocked",
            f"cannot write the plan ({error}); the profile stays until its handler is out of "
            "the plan. Retrying with backoff. To force removal: kubectl patch wrp "
            f"{w.target} --type=json -p "
            '\'[{"op":"remove","path":"/metadata/finalizers"}]\'',
        )
        for w in outcome.writes
        if w.kind == "remove-finalizer"
    ]


def status_update(write: Write) -> dict[str, Any]:
    """The PUT of a profile's status subresource, conditional on the version the status
    was computed from (a merge patch costs kube-apiserver more: it encodes the stored object
    and patches it first). The API server takes nothing but the status from the body."""
    metadata = (write.observed or {}).get("metadata", {})
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": write.target,
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "status": write.body["status"],
    }


def _superseded(write: Write, failure: Exception | None) -> bool:
    """A status write refused because the profile changed after the pass read it: no
    error (a user's edit racing a write), the status is written from the newer version."""
    return write.kind == "update-status" and isinstance(failure, ApiError) and failure.status == 409
