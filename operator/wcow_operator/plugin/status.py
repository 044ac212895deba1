"""``kubectl wcow status``, decided: the cluster's objects in, a report out (no API calls).

Where each node stands in the rollout is decided by the operator's own rule
(``reconcile.rollout_decision.node_state`` over the agent's report, parsed with the contract's
``parse_agent_status``), so the plugin and the operator cannot disagree about a node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_LABEL
from wcow_contract.labels import (
    CONTAINERD_LINE_LABEL,
    GUEST_BUILD_LABEL_PREFIX,
    HYPERV_LABEL,
    NODE_LABEL_PREFIX,
)
from wcow_contract.text import printable
from wcow_contract.wire.agent_status import (
    AGENT_STATUS_ANNOTATION,
    AgentStatus,
    failed_change,
    parse_agent_status,
)
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, Rollout, parse_rollout
from wcow_operator.reconcile.nodes import node_report
from wcow_operator.reconcile.rollout_decision import node_state

CAPABILITY_PREFIX: Final = NODE_LABEL_PREFIX
CELL: Final = 120  # characters of free text in one table cell
MAX_PLAN_BYTES: Final = 4 * 1024 * 1024  # a ConfigMap holds at most 1 MiB; leave room
NO_REPORT: Final = "no-report"


@dataclass(frozen=True)
class NodeLine:
    """One Windows node: its capabilities, its plan, and where it stands in the rollout."""

    name: str
    build: str
    hyperv: str
    """The node's capability label node.runtime.wcow.dev/hyperv (else its agent's report)."""
    containerd: str
    containerd_line: str
    """The capability label node.runtime.wcow.dev/containerd-line (what profiles select on)."""
    guest_builds: list[str]
    capabilities: dict[str, str]
    plan: str  # current | older | no-report
    rollout: str  # done | applying | waiting | failed | no-report | "" (no rollout)
    why: str
    handlers: dict[str, str]  # handler -> "State" or "State/Reason"


@dataclass(frozen=True)
class ProfileLine:
    name: str
    isolation: str
    build: str
    handler: str
    ready: str
    ready_reason: str
    eligible: int
    ready_nodes: int
    failed: int
    rolled_out: str
    rollout: dict[str, int] | None  # node counts by rollout state; None: not in the change
    failures: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class RolloutLine:
    plan_hash: str
    current: bool  # the rollout is for the plan in the plan ConfigMap
    changed_handlers: list[str]
    max_unavailable: int
    halted: dict[str, str] | None
    # profile -> its held-back change: handler, generation, reason, message, since, nodes
    held: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    namespace: str
    plan_hash: str | None
    rollout: RolloutLine | None
    profiles: list[ProfileLine]
    nodes: list[NodeLine]
    notes: list[str]

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def read_plan(config_map: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The plan in its ConfigMap (``plan.json``), None when absent or unreadable."""
    text = ((config_map or {}).get("data") or {}).get("plan.json")
    if not isinstance(text, str) or len(text) > MAX_PLAN_BYTES:
        return None
    try:
        plan = json.loads(text)
    except ValueError:
        return None
    return plan if isinstance(plan, dict) and isinstance(plan.get("hash"), str) else None


def read_rollout(config_map: Mapping[str, Any] | None) -> Rollout | None:
    text = ((config_map or {}).get("data") or {}).get("rollout.json")
    return parse_rollout(text if isinstance(text, str) else None)


def agent_status_of(node: Mapping[str, Any]) -> AgentStatus | None:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return parse_agent_status(annotations.get(AGENT_STATUS_ANNOTATION))


def _text(value: object) -> str:
    return printable(str(value), CELL) if value not in (None, "") else ""


def _condition(profile: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for condition in (profile.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return {}


def _where(
    name: str,
    status: AgentStatus | None,
    plan: Mapping[str, Any] | None,
    rollout: Rollout | None,
) -> tuple[str, str]:
    """(rollout state, why) of one node, by the operator's rule."""
    if status is None:
        return NO_REPORT, "no readable agent status: no agent running, or its report is invalid"
    if plan is None or rollout is None or rollout.plan_hash != plan["hash"]:
        return "", ""
    changed = frozenset(rollout.changed_handlers)
    state = str(node_state(node_report(status), plan, changed))
    halted = {f.node: f for f in rollout.halted.nodes} if rollout.halted else {}
    if name in halted:
        return "failed", _text(f"{halted[name].reason}: {halted[name].message}")
    if state == "waiting" and name in rollout.permitted:
        return "applying", f"let in at {rollout.permitted[name]}"
    return state, _why(state, status, changed, rollout)


def _why(state: str, status: AgentStatus, changed: frozenset[str], rollout: Rollout) -> str:
    if state == "failed":
        broken = [
            f"{h}: {e.reason}: {e.message}"
            for h, e in sorted(status.handlers.items())
            if h in changed and failed_change(e.state, e.reason)
        ]
        return _text("; ".join(broken) or "the change failed on this node")
    if state == "applying":
        return "trying the plan: containerd restart and canaries"
    if state == "waiting" and rollout.halted is not None:
        return "the rollout is halted: nobody new is let in"
    if state == "waiting":
        return _text(status.waiting or "waiting for its turn (maxUnavailable)")
    return ""


def node_line(
    node: Mapping[str, Any], plan: Mapping[str, Any] | None, rollout: Rollout | None
) -> NodeLine:
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name", ""))
    labels: dict[str, str] = metadata.get("labels") or {}
    status = agent_status_of(node)
    guests = sorted(
        k.removeprefix(GUEST_BUILD_LABEL_PREFIX)
        for k, v in labels.items()
        if k.startswith(GUEST_BUILD_LABEL_PREFIX) and v == "true"
    )
    if not guests and status is not None and status.guest_builds:
        guests = sorted(b.rsplit(".", 1)[-1] for b in status.guest_builds)
    state, why = _where(name, status, plan, rollout)
    if status is None:
        on_plan = NO_REPORT
    else:
        on_plan = "current" if plan and status.applied_plan_hash == plan["hash"] else "older"
    return NodeLine(
        name=name,
        build=labels.get(WINDOWS_BUILD_LABEL, ""),
        hyperv=_text(labels.get(HYPERV_LABEL))
        or ("" if status is None else str(status.hyperv_available).lower()),
        containerd="" if status is None else _text(status.containerd_version),
        containerd_line=_text(labels.get(CONTAINERD_LINE_LABEL)),
        guest_builds=guests,
        capabilities={k: v for k, v in sorted(labels.items()) if k.startswith(CAPABILITY_PREFIX)},
        plan=on_plan,
        rollout=state,
        why=why,
        handlers={
            h: e.state if e.reason in ("", "CanaryPassed") else f"{e.state}/{e.reason}"
            for h, e in sorted((status.handlers if status else {}).items())
        },
    )


def profile_line(
    profile: Mapping[str, Any], nodes: Sequence[NodeLine], rollout: Rollout | None
) -> ProfileLine:
    metadata = profile.get("metadata") or {}
    spec = profile.get("spec") or {}
    status = profile.get("status") or {}
    counts = status.get("nodes") or {}
    name = str(metadata.get("name", ""))
    handler = str(status.get("handler") or spec.get("handler") or name)
    ready = _condition(profile, "Ready")
    rolled = _condition(profile, "RolledOut")
    progress = None
    if rollout is not None and handler in rollout.changed_handlers:
        states = ("done", "applying", "waiting", "failed")
        progress = {s: sum(1 for n in nodes if n.rollout == s) for s in states}
    return ProfileLine(
        name=name,
        isolation=str(spec.get("isolation", "")),
        build=str(spec.get("windowsBuild", "")),
        handler=handler,
        ready=str(ready.get("status", "Unknown")),
        ready_reason=_text(ready.get("reason")),
        eligible=int(counts.get("eligible") or 0),
        ready_nodes=int(counts.get("ready") or 0),
        failed=int(counts.get("failed") or 0),
        rolled_out=_text(
            f"{rolled.get('status')} ({rolled.get('reason')})" if rolled else "Unknown"
        ),
        rollout=progress,
        failures=[
            {k: _text(f.get(k)) for k in ("node", "reason", "message")}
            for f in status.get("failures") or []
            if isinstance(f, dict)
        ],
    )


def report(
    *,
    namespace: str,
    profiles: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    config_maps: Mapping[str, Mapping[str, Any] | None],
) -> Report:
    """The report from the profiles, the Windows Nodes and the plan and rollout ConfigMaps
    (by name, as ``ClusterReader.plan_and_rollout`` gives them)."""
    plan_map = config_maps.get(PLAN_CONFIGMAP)
    rollout_map = config_maps.get(ROLLOUT_CONFIGMAP)
    plan = read_plan(plan_map)
    rollout = read_rollout(rollout_map)
    notes = []
    if plan_map is None:
        notes.append(f"no plan ConfigMap in namespace {namespace}: is the operator there?")
    elif plan is None:
        notes.append("the plan ConfigMap holds no readable plan")
    if rollout_map is not None and rollout is None:
        notes.append("the rollout ConfigMap is unreadable: no node may change")
    line = None
    if rollout is not None:
        halted = rollout.halted
        line = RolloutLine(
            plan_hash=rollout.plan_hash,
            current=plan is not None and rollout.plan_hash == plan["hash"],
            changed_handlers=list(rollout.changed_handlers),
            max_unavailable=rollout.max_unavailable,
            halted=None
            if halted is None
            else {"reason": halted.reason, "message": _text(halted.message), "since": halted.since},
            held={
                name: {
                    "handler": hold.handler,
                    "generation": str(hold.generation),
                    "reason": hold.reason,
                    "message": _text(hold.message),
                    "since": hold.since,
                    "nodes": " ".join(f.node for f in hold.nodes),
                }
                for name, hold in sorted(rollout.held.items())
            },
        )
        if not line.current:
            notes.append("the rollout is for another plan: the operator has not caught up yet")
    node_lines = sorted((node_line(n, plan, rollout) for n in nodes), key=lambda n: n.name)
    return Report(
        namespace=namespace,
        plan_hash=plan["hash"] if plan else None,
        rollout=line,
        profiles=sorted(
            (profile_line(p, node_lines, rollout) for p in profiles), key=lambda p: p.name
        ),
        nodes=node_lines,
        notes=notes,
    )
