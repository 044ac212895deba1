"""Per-handler node counts from the agents' Node annotations and ready labels.

Each node contributes to the handlers its agent reports; a ``NodeTally`` adds and removes
contributions one node at a time, so a change on one node costs work for that node only,
whatever the size of the fleet.

A node's report is checked against the node before it counts. The build comes from the
kubelet's label ``node.kubernetes.io/windows-build``, not from the agent's report; Hyper-V
from the agent (nothing else on the Node says it). A node that reports a
handler as anything but NotEligible while its build and Hyper-V cannot run it (Hyper-V
isolation: Hyper-V and host build >= guest build; process isolation: a compatible build), or
whose agent reports another build than its kubelet, is neither eligible nor ready: it is
listed with the reason ``ReportInconsistent``. Claims are judged against the current plan
entry once the node says it applied the current plan; a node still on an older plan is
judged when it reaches this one (the rollout waits for it meanwhile).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wcow_contract.catalog.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WindowsBuild,
    isolation_refusal,
    parse_windows_build,
)
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.text import printable
from wcow_contract.v1alpha1 import NodeFailure
from wcow_contract.wire.agent_status import (
    CANNOT_RUN_HERE,
    GUEST_BUILD_UNSUPPORTED,
    AgentStatus,
    parse_agent_status,
)
from wcow_operator.reconcile.model import ObservedNode
from wcow_operator.reconcile.rollout_decision import NodeReport

MAX_FAILURES = 5
MAX_UNFIT = 3  # reasons why no node can run a handler, in its condition's message
UNFIT_MESSAGE = 200  # characters of an agent's message quoted there
# NotEligible reasons that a platform team can act on (the node's containerd drops settings
# the handler needs): listed with the failures, though the node is not counted as eligible.
ACTIONABLE_INELIGIBILITY = frozenset({"ContainerdTooOld", GUEST_BUILD_UNSUPPORTED})
INCONSISTENT = "ReportInconsistent"


@dataclass(frozen=True)
class NodeSummary:
    eligible: int = 0
    ready: int = 0
    failed: int = 0
    failures: list[NodeFailure] = field(default_factory=list)
    without_agent: int = 0  # Windows nodes with no readable agent status
    ineligible: int = 0  # nodes that cannot run it for an actionable reason (in failures)
    inconsistent: int = 0  # nodes that report what they cannot run (in failures)
    # Why the other nodes cannot run it: (nodes, reason, agent's message), most nodes first
    unfit: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class NodeHost:
    """What a node can run, as far as the operator can tell: the kubelet's build and the
    agent's word on Hyper-V."""

    build: WindowsBuild
    hyperv: bool


@dataclass(frozen=True)
class HandlerNeeds:
    """What the current plan entry of a handler asks of a host."""

    isolation: str
    guest: WindowsBuild | None
    plan_hash: str

    @classmethod
    def of(cls, entry: Mapping[str, Any] | None, plan_hash: str | None) -> HandlerNeeds | None:
        if not entry or plan_hash is None:
            return None
        build = entry.get("windowsBuild")
        guest = parse_windows_build(build) if isinstance(build, str) else None
        return cls(str(entry.get("isolation")), guest, plan_hash)

    def refusal(self, host: NodeHost) -> tuple[str, str] | None:
        return isolation_refusal(self.isolation, self.guest, host.build, host.hyperv)


@dataclass(frozen=True)
class HandlerStanding:
    """Where one node stands for one handler it reports (NotEligible ones are left out,
    but for the actionable reasons)."""

    ready: bool
    failure: NodeFailure | None  # Failed or Conflict, and not labelled ready
    eligible: bool = True
    inconsistent: bool = False  # listed as ReportInconsistent whatever the plan says
    unfit: tuple[str, str] | None = None  # NotEligible: (reason, message) of the agent


# Nodes that report alike for a handler, judged together against its current entry: the
# host they claim to run it on, and the plan they say they applied.
Bucket = tuple[NodeHost | None, str | None]


@dataclass(frozen=True)
class Contribution:
    has_agent: bool
    handlers: Mapping[str, HandlerStanding]
    report: NodeReport | None = None  # what the rollout reads
    host: NodeHost | None = None  # None: the report cannot be checked against the node

    @property
    def bucket(self) -> Bucket:
        return self.host, self.report.applied_plan_hash if self.report else None


def node_build(node: ObservedNode) -> WindowsBuild | None:
    try:
        return parse_windows_build(node.build) if node.build else None
    except ValueError:
        return None


def _inconsistency(node: ObservedNode, reported: str) -> str | None:
    """Why the agent's report does not fit the Node at all (None: it fits)."""
    build = node_build(node)
    if build is None:
        return (
            f"the Node has no valid {WINDOWS_BUILD_LABEL} label (the kubelet sets it on every "
            "Windows node), so its agent's report cannot be checked"
        )
    if build.label_value != reported:
        return (
            f"its agent reports host build {reported}, its kubelet labels it "
            f"{WINDOWS_BUILD_LABEL}={build.label_value}"
        )
    return None


def node_report(status: AgentStatus) -> NodeReport:
    """What an agent's status says about plans, as the rollout reads it."""
    return NodeReport(
        applied_plan_hash=status.applied_plan_hash,
        attempted_plan_hash=status.attempted_plan_hash,
        states={h: (e.state, e.reason, e.message) for h, e in status.handlers.items()},
        generations={h: e.profile_generation for h, e in status.handlers.items()},
    )


def contribution(node: ObservedNode) -> Contribution:
    """What ``node`` adds to each handler's counts. Ready only with the label (the scheduler
    reads the label, so the label decides); eligible when its agent reports the handler as
    anything but NotEligible; failed when it reports Failed or Conflict. Whether the node
    can run what it claims is decided per handler in ``NodeTally.summary``."""
    status = parse_agent_status(node.agent_status)
    if status is None:
        return Contribution(False, {})
    report = node_report(status)
    wrong = _inconsistency(node, status.host_build)
    build = node_build(node)
    host = NodeHost(build, status.hyperv_available) if build and not wrong else None
    standings: dict[str, HandlerStanding] = {}
    for handler, entry in status.handlers.items():
        if entry.state == "NotEligible":
            if entry.reason in ACTIONABLE_INELIGIBILITY:
                note = NodeFailure(node=node.name, reason=entry.reason, message=entry.message)
                standings[handler] = HandlerStanding(False, note, eligible=False)
            else:
                unfit = (entry.reason, entry.message)
                standings[handler] = HandlerStanding(False, None, eligible=False, unfit=unfit)
            continue
        if entry.state == "Failed" and entry.reason in CANNOT_RUN_HERE:
            # Applied, but this node's pause image cannot start the class's pods: a node
            # pool for another class. Listed, not counted against the profile's own nodes.
            note = NodeFailure(node=node.name, reason=entry.reason, message=entry.message)
            standings[handler] = HandlerStanding(False, note, eligible=False)
            continue
        if wrong:
            note = NodeFailure(node=node.name, reason=INCONSISTENT, message=wrong)
            standings[handler] = HandlerStanding(False, note, eligible=False, inconsistent=True)
            continue
        ready = node.labels.get(ready_label(handler)) == READY_VALUE
        failure = None
        if not ready and entry.state in ("Failed", "Conflict"):
            failure = NodeFailure(node=node.name, reason=entry.reason, message=entry.message)
        standings[handler] = HandlerStanding(ready, failure)
    return Contribution(True, standings, report, host)


@dataclass
class _Counts:
    eligible: int = 0
    ready: int = 0
    failures: dict[str, NodeFailure] = field(default_factory=dict)  # by node name
    ineligible: dict[str, NodeFailure] = field(default_factory=dict)  # actionable, by node
    inconsistent: dict[str, NodeFailure] = field(default_factory=dict)  # by node
    claimants: set[str] = field(default_factory=set)  # nodes counted as eligible
    unfit: Counter[tuple[str, str]] = field(default_factory=Counter)  # (reason, message)

    def empty(self) -> bool:
        return not (self.eligible or self.ineligible or self.inconsistent or self.unfit)

    def copy(self) -> _Counts:
        return _Counts(
            self.eligible,
            self.ready,
            dict(self.failures),
            dict(self.ineligible),
            dict(self.inconsistent),
            set(self.claimants),
            Counter(self.unfit),
        )


class NodeTally:
    """Running per-handler counts over a set of nodes, grouped by what the nodes claim."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[Bucket, _Counts]] = {}
        self._without_agent = 0

    @classmethod
    def of(cls, nodes: Iterable[ObservedNode]) -> NodeTally:
        tally = cls()
        for node in nodes:
            tally.add(node.name, contribution(node))
        return tally

    def add(self, node: str, part: Contribution, sign: int = 1) -> None:
        if not part.has_agent:
            self._without_agent += sign
            return
        for handler, standing in part.handlers.items():
            buckets = self._counts.setdefault(handler, {})
            counts = buckets.setdefault(part.bucket, _Counts())
            if standing.inconsistent:
                listed = counts.inconsistent
            else:
                listed = counts.failures if standing.eligible else counts.ineligible
            if standing.unfit is not None:
                counts.unfit[standing.unfit] += sign
                counts.unfit = +counts.unfit  # drops what reached zero
            if standing.eligible:
                counts.eligible += sign
                counts.ready += sign if standing.ready else 0
                _mark(counts.claimants, node, sign)
            if standing.failure is not None:
                if sign > 0:
                    listed[node] = standing.failure
                else:
                    listed.pop(node, None)
            if counts.empty():
                del buckets[part.bucket]
                if not buckets:
                    del self._counts[handler]

    def remove(self, node: str, part: Contribution) -> None:
        self.add(node, part, sign=-1)

    def summary(self, handler: str, needs: HandlerNeeds | None = None) -> NodeSummary:
        """The counts of ``handler``; with ``needs`` (its current plan entry), nodes on that
        plan that report it runnable where their host cannot run it count as
        ReportInconsistent instead of eligible or ready."""
        total = _Counts()
        for (host, applied), counts in self._counts.get(handler, {}).items():
            total.ineligible.update(counts.ineligible)
            total.inconsistent.update(counts.inconsistent)
            total.unfit.update(counts.unfit)
            if needs is not None and host is not None and applied == needs.plan_hash:
                refusal = needs.refusal(host)
                if refusal is not None:
                    for name in counts.claimants:
                        total.inconsistent[name] = _claim_refused(name, host, refusal)
                    continue
            total.eligible += counts.eligible
            total.ready += counts.ready
            total.failures.update(counts.failures)
        # Failures first, then nodes that report what they cannot run, then nodes that cannot
        # run it for a reason one can fix; each by node name.
        first = [
            listed[name]
            for listed in (total.failures, total.inconsistent, total.ineligible)
            for name in heapq.nsmallest(MAX_FAILURES, listed)
        ][:MAX_FAILURES]
        return NodeSummary(
            eligible=total.eligible,
            ready=total.ready,
            failed=len(total.failures),
            failures=first,
            without_agent=self._without_agent,
            ineligible=len(total.ineligible),
            inconsistent=len(total.inconsistent),
            unfit=tuple(
                (n, reason, message)
                for (reason, message), n in sorted(
                    total.unfit.items(), key=lambda item: (-item[1], item[0])
                )[:MAX_UNFIT]
            ),
        )

    @staticmethod
    def reports(nodes: Iterable[ObservedNode]) -> dict[str, NodeReport]:
        """The rollout's view of ``nodes`` (those with an agent report)."""
        return {
            node.name: part.report
            for node in nodes
            if (part := contribution(node)).report is not None
        }

    def copy(self) -> NodeTally:
        """A snapshot for one pass (the failures themselves are immutable)."""
        twin = NodeTally()
        twin._without_agent = self._without_agent
        twin._counts = {
            handler: {bucket: counts.copy() for bucket, counts in buckets.items()}
            for handler, buckets in self._counts.items()
        }
        return twin


def _mark(names: set[str], node: str, sign: int) -> None:
    if sign > 0:
        names.add(node)
    else:
        names.discard(node)


def _claim_refused(node: str, host: NodeHost, refusal: tuple[str, str]) -> NodeFailure:
    reason, why = refusal
    hyperv = "with" if host.hyperv else "without"
    return NodeFailure(
        node=node,
        reason=INCONSISTENT,
        message=(
            f"its agent reports it can run the handler, but a {host.build.label_value} host "
            f"{hyperv} Hyper-V (build from the kubelet's {WINDOWS_BUILD_LABEL} label) cannot: "
            f"{reason}: {why}"
        ),
    )


def summarize(
    handler: str, nodes: Iterable[ObservedNode], needs: HandlerNeeds | None = None
) -> NodeSummary:
    """How the Windows nodes stand for ``handler`` (see ``contribution``)."""
    return NodeTally.of(nodes).summary(handler, needs)


def describe(summary: NodeSummary) -> str:
    parts = [f"{summary.ready}/{summary.eligible} eligible Windows nodes ready"]
    if summary.failed:
        first = ", ".join(
            f"{f.node}: {f.reason}"
            for f in summary.failures
            if f.reason not in ACTIONABLE_INELIGIBILITY | {INCONSISTENT}
        )
        parts.append(f"{summary.failed} failed ({first})")
    if summary.inconsistent:
        parts.append(
            f"{summary.inconsistent} Windows nodes report that they can run it where their "
            f"own build or Hyper-V cannot ({INCONSISTENT}: see failures)"
        )
    if summary.ineligible:
        reasons = sorted(
            {f.reason for f in summary.failures if f.reason in ACTIONABLE_INELIGIBILITY}
        )
        parts.append(
            f"{summary.ineligible} Windows nodes cannot run it ({', '.join(reasons)}: see failures)"
        )
    if summary.without_agent:
        parts.append(f"{summary.without_agent} Windows nodes report no agent status yet")
    if summary.eligible == 0 and summary.unfit:
        parts.append(f"no Windows node can run it: {_unfit(summary.unfit)}")
    return "; ".join(parts)


def _unfit(groups: tuple[tuple[int, str, str], ...]) -> str:
    """Why nodes cannot run a handler, as their agents say (untrusted: escaped, bounded),
    grouped: "3 nodes: HostBuildTooOld (guest build 10.0.26100 is newer than ...)"."""
    return "; ".join(
        f"{n} node{'s' if n > 1 else ''}: {printable(reason, 128)} "
        f"({printable(message, UNFIT_MESSAGE)})"
        for n, reason, message in groups
    )
