"""The agent's decisions, pure: no I/O, no clock, no Kubernetes.

``node_agent.py`` and its steps gather facts from the host and act; ``loop/agent_loop.py``
talks to the cluster. Everything that decides (whether to restart, which tables drifted,
which handlers need a canary, what the Node's labels and status annotation become) is here
and unit-tested without fakes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wcow_agent.config.containerd_lines import release_line, version_tuple
from wcow_agent.config.merge import MergeResult
from wcow_agent.config.merge_decision import BUILTIN_RUNTIMES_1_6, BUILTIN_RUNTIMES_1_7, table_hash
from wcow_agent.config.placement import Placement
from wcow_agent.config.state import AgentState
from wcow_agent.cycle.canary import CanaryResult
from wcow_contract.catalog.windows_builds import parse_windows_build, process_can_run
from wcow_contract.labels import (
    CONTAINERD_LINE_LABEL,
    GUEST_BUILD_LABEL_PREFIX,
    GUEST_BUILD_VALUE,
    HYPERV_LABEL,
    READY_VALUE,
    guest_build_label,
    ready_label,
)
from wcow_contract.wire.agent_status import (
    GUEST_BUILD_UNSUPPORTED,
    AgentStatus,
    ConfigRewrite,
    HandlerState,
    HandlerStatus,
    PlacementStatus,
    PlacementWay,
)
from wcow_contract.wire.plan import PlanEntry


@dataclass(frozen=True)
class HostFacts:
    build: str  # 10.0.<build>
    hyperv_available: bool
    containerd_version: str | None


@dataclass(frozen=True)
class HandlerOutcome:
    state: HandlerState
    reason: str
    message: str = ""
    generation: int | None = None
    canary_duration: float | None = None
    carried: bool = False
    """The canary was not rerun: the previous result for this table still holds."""


@dataclass
class CycleReport:
    """What one reconcile found and did; the runner turns it into labels, status, metrics
    and events."""

    facts: HostFacts | None = None
    config_version: int | None = None
    plan_hash: str | None = None
    handlers: dict[str, HandlerOutcome] | None = None
    """None: no plan to judge by (ConfigMap missing or unreadable); keep the labels."""
    result: str = "unchanged"
    """unchanged | applied | rolled_back | rejected | refused | failed | waiting (a paced
    plan the rollout has not let this node change to yet) | restart_required (written,
    ``--restart-mode none``: containerd's owner restarts it)."""
    attempted_plan_hash: str | None = None
    applied_plan_hash: str | None = None
    """From the agent's state: the plan last begun, and the last one applied with every
    handler it changed proven (None: not known, the last report's stands)."""
    waiting: str | None = None
    """Why the node keeps its config.toml instead of changing to the plan (paced rollout)."""
    wrote: bool = False
    restarts: list[str] = field(default_factory=list)  # reason per restart
    drift_repaired: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    canaries: list[CanaryResult] = field(default_factory=list)
    events: list[tuple[str, str, bool]] = field(default_factory=list)  # (reason, message, warn)
    requeue: bool = False
    """Something is worth retrying soon (network not ready, containerd had not loaded the
    file), not only at the next resync."""
    pause_image: str | None = None
    """The pause image of the file containerd runs (None: not known this cycle)."""
    guest_builds: list[str] | None = None
    """The guest builds its Hyper-V pods can boot (None: not known this cycle)."""
    pause_build: str | None = None
    """The pause image's own build (None: not known this cycle)."""
    placement: Placement | None = None
    """Where the handlers go on this node (None: not decided this cycle)."""
    rewritten: list[str] = field(default_factory=list)
    """Files the node rewrote behind the agent, which it wrote again this cycle."""
    restart_required: bool = False
    """``--restart-mode none``: files written that containerd has not loaded yet."""

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message, warning))


@dataclass(frozen=True)
class NodeLabels:
    """This node's labels as the runner read them from its Node, and the guest builds the
    agent's last report named (the guest-build labels it set, and may take away)."""

    labels: Mapping[str, str]
    reported_guest_builds: list[str] | None = None

    @classmethod
    def of(cls, labels: Mapping[str, str], last: AgentStatus | None) -> NodeLabels:
        return cls(dict(labels), last.guest_builds if last is not None else None)

    def after_report(self, facts: HostFacts, guest_builds: list[str] | None) -> dict[str, str]:
        """The labels the Node carries once this cycle's capability and guest-build labels
        are written: what a profile's nodeSelector is judged against, so a class selecting
        ``node.runtime.wcow.dev/guest-build-17763`` reaches a new node of that pool in its
        first cycle."""
        patch = {
            **guest_label_changes(self.labels, guest_builds, self.reported_guest_builds),
            **capability_label_changes(self.labels, facts),
        }
        labels = dict(self.labels)
        for key, value in patch.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        return labels


def selected_handlers(
    handlers: Mapping[str, PlanEntry], labels: Mapping[str, str] | None
) -> dict[str, PlanEntry]:
    """The plan's handlers whose profile's nodeSelector lets this node in: the others are
    not applied here at all (no table, no restart, no report). ``labels`` None: not known
    (the offline merge), every handler is judged as if selected."""
    if labels is None:
        return dict(handlers)
    return {h: entry for h, entry in handlers.items() if entry.selects(labels)}


def builtin_runtimes_for(containerd_version: str | None) -> Mapping[str, Mapping[str, Any]]:
    """containerd 1.x's built-in Windows handlers, which a version-2 file loses as soon as
    it defines a runtime (1.6 has only runhcs-wcow-process)."""
    if containerd_version is not None and version_tuple(containerd_version) < (1, 7):
        return BUILTIN_RUNTIMES_1_6
    return BUILTIN_RUNTIMES_1_7


def restart_reason(
    state: AgentState, disk_hash: str | None, restart_mode: str = "service"
) -> str | None:
    """Why containerd must restart before anything else, after a crash: a restart was
    begun and not confirmed, or the agent wrote the file on disk and containerd never came
    up with it (the agent died between the write and the restart). Never where the agent
    does not restart containerd (``--restart-mode none``): its owner does."""
    if restart_mode == "none":
        return None
    if state.restart_pending:
        return "recovery"
    if (
        disk_hash is not None
        and disk_hash == state.written
        and state.loaded is not None
        and state.loaded != disk_hash
    ):
        return "recovery"
    return None


def drifted(
    result: MergeResult,
    owned_before: Mapping[str, str],
    desired: Mapping[str, Mapping[str, Any]],
    moved: Collection[str] = (),
) -> list[str]:
    """Handlers whose table the agent had written exactly as desired, and that the merge
    had to add or rewrite: something else removed or changed them (not the agent moving
    them to another file: ``moved``)."""
    return sorted(
        handler
        for handler in (*result.added, *result.updated)
        if handler in desired
        and handler not in moved
        and owned_before.get(handler) == table_hash(desired[handler])
    )


WAY_NAMES: Mapping[str, PlacementWay] = {
    "drop-in": "DropIn",
    "template": "Template",
    "merge": "Merge",
}


def placement_status(
    report: CycleReport, previous: PlacementStatus | None, now: str
) -> PlacementStatus | None:
    """Where the handlers go, as the Node's status says it; the last rewrite of the
    configuration behind the agent is kept until the next one."""
    placement = report.placement
    if placement is None:
        return previous
    rewrite = previous.last_rewrite if previous is not None else None
    if report.rewritten:
        rewrite = ConfigRewrite(
            reason="ConfigRewritten",
            message=f"rewritten behind the agent, written again: {', '.join(report.rewritten)}",
            time=now,
        )
    return PlacementStatus(
        way=WAY_NAMES.get(placement.way) if placement.way is not None else None,
        reason=placement.reason,
        message=placement.message,
        restart_required=True if report.restart_required else None,
        last_rewrite=rewrite,
    )


def needs_canary(
    handler: str, table: str, state: AgentState, forced: bool, failed_before: bool
) -> bool:
    """A canary runs for a table that has not passed one yet (new, changed, or failed
    last time), or when one was requested."""
    return forced or failed_before or state.canaried.get(handler) != table


def default_canary_image(
    entry: PlanEntry, host_build: str | None, images: Mapping[str, str]
) -> str | None:
    """The agent's canary image (``--canary-image BUILD=IMAGE``) for a handler whose profile
    names none: the one of its guest build (Hyper-V), or of the host's build (process
    isolation runs the host's build)."""
    build = (
        entry.windows_build if entry.isolation == "HyperV" else entry.windows_build or host_build
    )
    return images.get(build) if build else None


def canary_enabled(entry: PlanEntry) -> bool:
    return entry.canary.enabled


def guest_builds_of(pause_build: str | None, facts: HostFacts) -> list[str]:
    """The guest builds this node's Hyper-V pods can boot: the pause image's build (hcsshim
    boots the utility VM from its base layer), when the host has Hyper-V and is not older
    than that build; none otherwise."""
    if pause_build is None or not facts.hyperv_available:
        return []
    pause, host = parse_windows_build(pause_build), parse_windows_build(facts.build)
    return [pause.label_value] if pause.number <= host.number else []


def guest_build_refusal(
    entry: PlanEntry,
    pause_image: str | None,
    guest_builds: list[str] | None,
    *,
    pause_build: str | None = None,
    host_build: str | None = None,
) -> tuple[str, str] | None:
    """(reason, message) when this node's pause image cannot start the class's pods: a
    Hyper-V handler whose guest build is not one the pause image boots (hcsshim boots the
    utility VM from its base layer: docs/images.md, section 3), or a process handler where
    the pause image (``pause_build``) is of a build process isolation cannot run on this
    host (``host_build``): the sandbox is the pause container. The handler is applied, but
    the node is of a pool for other classes. None when it can, or when it is not known."""
    if entry.isolation == "Process":
        return _process_pause_refusal(pause_image, pause_build, host_build)
    guest = entry.windows_build
    if guest is None or guest_builds is None:
        return None
    if guest in guest_builds:
        return None
    number = guest.rsplit(".", 1)[1]
    boots = ", ".join(guest_builds) or "no guest build"
    return (
        GUEST_BUILD_UNSUPPORTED,
        f"applied, but not ready for images of guest build {guest}: this node's pause image "
        f"{pause_image} boots {boots} (hcsshim boots a Hyper-V pod's utility VM from the pause "
        f"image's base layer). Run this class on nodes labelled "
        f"{GUEST_BUILD_LABEL_PREFIX}{number}=true, or give this node pool a pause image of "
        f"{guest} (wcow-agent --pause-image, chart agent.pauseImage)",
    )


def _process_pause_refusal(
    pause_image: str | None, pause_build: str | None, host_build: str | None
) -> tuple[str, str] | None:
    if pause_build is None or host_build is None:
        return None
    pause, host = parse_windows_build(pause_build), parse_windows_build(host_build)
    if process_can_run(host, pause):
        return None
    return (
        GUEST_BUILD_UNSUPPORTED,
        f"applied, but process-isolated pods cannot start here: this node's pause image "
        f"{pause_image} is of build {pause.label_value}, which process isolation cannot run "
        f"on a {host.label_value} host (the pod sandbox is the pause container). Run this "
        "class on a node pool whose pause image is of the host's build",
    )


def build_status(
    report: CycleReport,
    previous: AgentStatus | None,
    now: str,
) -> AgentStatus | None:
    """The Node's ``runtime.wcow.dev/agent-status``. Transition times change only when a
    handler's state changes; ``updatedAt`` only when anything else does. None when the
    host is unknown (never read, and no earlier status to fall back on)."""
    facts = report.facts
    if facts is None and previous is not None:  # the host could not be read this time
        facts = HostFacts(
            previous.host_build, previous.hyperv_available, previous.containerd_version
        )
    if facts is None:
        return None
    old = previous.handlers if previous is not None else {}
    if report.handlers is None:
        handlers = dict(old)
    else:
        handlers = {
            name: handler_status(outcome, old.get(name), now)
            for name, outcome in sorted(report.handlers.items())
        }
    status = AgentStatus(
        host_build=facts.build,
        hyperv_available=facts.hyperv_available,
        containerd_version=facts.containerd_version,
        config_version=report.config_version
        if report.config_version is not None
        else (previous.config_version if previous else None),
        applied_plan_hash=report.applied_plan_hash
        or (previous.applied_plan_hash if previous else None),
        attempted_plan_hash=report.attempted_plan_hash
        or (previous.attempted_plan_hash if previous else None),
        waiting=report.waiting
        if report.handlers is not None
        else (previous.waiting if previous else None),
        pause_image=report.pause_image
        if report.pause_image is not None
        else (previous.pause_image if previous else None),
        guest_builds=report.guest_builds
        if report.guest_builds is not None
        else (previous.guest_builds if previous else None),
        placement=placement_status(report, previous.placement if previous else None, now),
        updated_at=previous.updated_at if previous is not None else None,
        handlers=handlers,
    )
    if previous is None or _content(status) != _content(previous):
        status = status.model_copy(update={"updated_at": now})
    return status


def handler_status(
    outcome: HandlerOutcome, before: HandlerStatus | None, now: str
) -> HandlerStatus:
    """One handler's status; a carried outcome keeps what the last report said of it."""
    duration = outcome.canary_duration
    message = outcome.message
    generation = outcome.generation
    same_state = before is not None and before.state == outcome.state
    if outcome.carried and before is not None and same_state:
        duration = before.canary_duration_seconds if duration is None else duration
        message = message or before.message
        generation = before.profile_generation if generation is None else generation
    return HandlerStatus(
        state=outcome.state,
        reason=outcome.reason,
        message=message,  # escaped and clipped by the model
        profile_generation=generation,
        canary_duration_seconds=None if duration is None else round(duration, 3),
        last_transition_time=before.last_transition_time
        if before is not None and same_state
        else now,
    )


def _content(status: AgentStatus) -> dict[str, Any]:
    data = status.model_dump(by_alias=True)
    data.pop("updatedAt", None)
    return data


def ready_handlers(report: CycleReport) -> set[str] | None:
    if report.handlers is None:
        return None
    return {name for name, outcome in report.handlers.items() if outcome.state == "Ready"}


def label_changes(current: Mapping[str, str], ready: Iterable[str]) -> dict[str, str | None]:
    """The Node label patch: ``runtime.wcow.dev/<handler>=ready`` for each ready handler,
    removal of every other such label (failed, removed, ineligible handlers). Labels of
    that prefix with another value are not the agent's and stay."""
    wanted = {ready_label(handler) for handler in ready}
    prefix = ready_label("")
    changes: dict[str, str | None] = {}
    for key in sorted(wanted):
        if current.get(key) != READY_VALUE:
            changes[key] = READY_VALUE
    for key, value in sorted(current.items()):
        if key.startswith(prefix) and value == READY_VALUE and key not in wanted:
            changes[key] = None
    return changes


def guest_label_changes(
    current: Mapping[str, str], builds: list[str] | None, reported: list[str] | None
) -> dict[str, str | None]:
    """The Node label patch for ``node.runtime.wcow.dev/guest-build-<N>``: "true" for each
    guest build the pause image boots; removal only of labels this agent set before (the
    builds its last status reported) that are no longer true, never of a label someone
    else set (a node pool's template, say). ``builds`` None: not known, no change."""
    if builds is None:
        return {}
    wanted = {guest_build_label(parse_windows_build(b)) for b in builds}
    changes: dict[str, str | None] = {
        key: GUEST_BUILD_VALUE for key in sorted(wanted) if current.get(key) != GUEST_BUILD_VALUE
    }
    for build in reported or []:
        key = guest_build_label(parse_windows_build(build))
        if key not in wanted and key in current:
            changes[key] = None
    return changes


def capability_labels(facts: HostFacts | None) -> dict[str, str]:
    """What the host found, as Node labels profiles and people can select on:
    ``node.runtime.wcow.dev/hyperv`` and ``node.runtime.wcow.dev/containerd-line``. Empty when
    the host could not be read (the labels stay as they were); no line label while
    containerd's version is unknown."""
    if facts is None:
        return {}
    labels = {HYPERV_LABEL: "true" if facts.hyperv_available else "false"}
    if facts.containerd_version is not None:
        # An unreadable version makes no label (parse_containerd_version gives N.N.N).
        with contextlib.suppress(ValueError):
            labels[CONTAINERD_LINE_LABEL] = release_line(facts.containerd_version)
    return labels


def capability_label_changes(
    current: Mapping[str, str], facts: HostFacts | None
) -> dict[str, str | None]:
    """The Node label patch that keeps the capability labels current (an upgraded containerd
    changes the line label at the next cycle)."""
    return {
        key: value for key, value in capability_labels(facts).items() if current.get(key) != value
    }
