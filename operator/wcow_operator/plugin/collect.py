"""What ``kubectl wcow diagnose`` reads, through ``ClusterReader`` (the API calls), into the
bundle's files. Each read stands alone: one that fails (forbidden, not found, no answer) is
written down in the bundle's README.txt with the server's reason, and the rest is still
collected, so a bundle from a person with less than the viewer roles still helps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Final, Protocol, TypeVar

from wcow_contract.labels import READY_LABEL_PREFIX
from wcow_contract.v1alpha1 import KIND
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.plugin import status, table
from wcow_operator.plugin.diagnose_bundle import dump

T = TypeVar("T")
OPERATOR_PODS: Final = "app.kubernetes.io/part-of=wcow-runtime,app.kubernetes.io/component=operator"
AGENT_PODS: Final = "app.kubernetes.io/part-of=wcow-runtime,app.kubernetes.io/component=node-agent"
MAX_AGENT_LOGS: Final = 20  # nodes whose agent logs are read; nodes with problems first
NODE_LABELS: Final = ("kubernetes.io/", "node.kubernetes.io/", "node.runtime.wcow.dev/")


class Reader(Protocol):
    """The reads the bundle needs (``k8s.reader.ClusterReader``)."""

    server: str

    def profiles(self) -> list[dict[str, Any]]: ...
    def runtime_classes(self) -> list[dict[str, Any]]: ...
    def windows_nodes(
        self, name: str | None = None, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]: ...
    def plan_and_rollout(self, namespace: str) -> dict[str, dict[str, Any] | None]: ...
    def leader_lease(self, namespace: str) -> dict[str, Any] | None: ...
    def events(self, namespace: str, field_selector: str = "") -> list[dict[str, Any]]: ...
    def pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...
    def pod_log(self, namespace: str, pod: str, container: str, *, previous: bool) -> str: ...
    def webhook_configurations(self) -> dict[str, dict[str, Any] | None]: ...


@dataclass
class Collection:
    files: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # reads that failed
    notes: list[str] = field(default_factory=list)  # what is not there, what was left out

    def read(self, what: str, call: Callable[[], T]) -> T | None:
        """``call()``, or None with the failure written down."""
        try:
            return call()
        except ApiError as error:
            self.problems.append(f"{what}: {error}")
            return None


def slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """A Node as the bundle keeps it: its wcow and kubelet labels, taints, the agent's
    report (parsed, as the operator reads it, or raw when unreadable), node info and
    conditions; not its images, addresses or other annotations."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    agent = status.agent_status_of(node)
    raw = (metadata.get("annotations") or {}).get(AGENT_STATUS_ANNOTATION)
    return {
        "name": metadata.get("name"),
        "labels": {
            k: v
            for k, v in sorted(labels.items())
            if k.startswith(NODE_LABELS) or k.startswith(READY_LABEL_PREFIX)
        },
        "taints": (node.get("spec") or {}).get("taints") or [],
        "agentStatus": agent.model_dump(by_alias=True, exclude_none=True) if agent else None,
        "agentStatusUnreadable": str(raw)[:65536] if raw and agent is None else None,
        "nodeInfo": (node.get("status") or {}).get("nodeInfo") or {},
        "conditions": (node.get("status") or {}).get("conditions") or [],
    }


def slim_event(event: Mapping[str, Any]) -> dict[str, Any]:
    involved = event.get("involvedObject") or {}
    return {
        "type": event.get("type"),
        "reason": event.get("reason"),
        "object": f"{involved.get('kind')}/{involved.get('name')}",
        "message": event.get("message"),
        "count": event.get("count"),
        "first": event.get("firstTimestamp") or event.get("eventTime"),
        "last": event.get("lastTimestamp") or event.get("eventTime"),
        "from": (event.get("source") or {}).get("component") or event.get("reportingComponent"),
    }


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    state = pod.get("status") or {}
    return {
        "name": (pod.get("metadata") or {}).get("name"),
        "node": spec.get("nodeName"),
        "phase": state.get("phase"),
        "containers": [
            {k: c.get(k) for k in ("name", "ready", "restartCount", "state", "lastState")}
            for c in state.get("containerStatuses") or []
        ],
    }


def _owned(runtime_class: Mapping[str, Any]) -> bool:
    owners = (runtime_class.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == KIND for o in owners)


def collect(reader: Reader, namespace: str, node: str | None, now: datetime) -> Collection:
    found = Collection()
    profiles = found.read("list WindowsRuntimeProfiles", reader.profiles) or []
    found.files["profiles.yaml"] = dump(profiles)
    classes = found.read("list RuntimeClasses", reader.runtime_classes) or []
    found.files["runtimeclasses.yaml"] = dump([c for c in classes if _owned(c)])
    maps = (
        found.read(
            f"get ConfigMaps {PLAN_CONFIGMAP}, {ROLLOUT_CONFIGMAP} in {namespace}",
            partial(reader.plan_and_rollout, namespace),
        )
        or {}
    )
    found.files["plan.yaml"] = dump(maps.get(PLAN_CONFIGMAP))
    found.files["rollout.yaml"] = dump(maps.get(ROLLOUT_CONFIGMAP))
    nodes = found.read("list Windows Nodes", partial(reader.windows_nodes, node)) or []
    if node and not nodes:
        found.notes.append(f"node {node}: no Windows Node of that name")
    for item in nodes:
        slim = slim_node(item)
        found.files[f"nodes/{slim['name']}.yaml"] = dump(slim)
    report = status.report(
        namespace=namespace,
        profiles=profiles,
        nodes=nodes,
        config_maps=maps,
    )
    found.files["status.txt"] = table.render(report)
    found.files["status.json"] = report.as_json()
    found.files["events.yaml"] = dump(_events(found, reader, namespace, node))
    found.files["leader.yaml"] = dump(
        found.read(f"get Lease in {namespace}", partial(reader.leader_lease, namespace))
    )
    found.files["webhooks.yaml"] = dump(
        found.read("get webhook configurations", reader.webhook_configurations)
    )
    _operator_logs(found, reader, namespace)
    _agent_logs(found, reader, namespace, report, node)
    found.files["README.txt"] = _readme(found, reader.server, namespace, node, now)
    return found


def _events(
    found: Collection, reader: Reader, namespace: str, node: str | None
) -> list[dict[str, Any]]:
    node_selector = "involvedObject.kind=Node" + (f",involvedObject.name={node}" if node else "")
    queries = [
        ("default", f"involvedObject.kind={KIND}"),
        ("default", node_selector),
        (namespace, ""),
    ]
    events: list[dict[str, Any]] = []
    for where, selector in queries:
        got = found.read(
            f"list events in {where} ({selector or 'all'})", partial(reader.events, where, selector)
        )
        events.extend(slim_event(e) for e in got or [])
    return sorted(events, key=lambda e: str(e["last"] or ""))


def _logs(
    found: Collection, reader: Reader, namespace: str, pod: Mapping[str, Any], folder: str
) -> None:
    """Each container's log and its previous instance's (after a restart) under ``folder``."""
    name = str((pod.get("metadata") or {}).get("name"))
    restarts = {
        c.get("name"): int(c.get("restartCount") or 0)
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    }
    for container in (pod.get("spec") or {}).get("containers") or []:
        cname = str(container.get("name"))
        what = f"log of {namespace}/{name} container {cname}"
        log = partial(reader.pod_log, namespace, name, cname)
        current = partial(log, previous=False)
        found.files[f"{folder}/{name}/{cname}.log"] = found.read(what, current) or ""
        if restarts.get(cname):
            previous = partial(log, previous=True)
            found.files[f"{folder}/{name}/{cname}.previous.log"] = (
                found.read(f"previous {what}", previous) or ""
            )


def _operator_logs(found: Collection, reader: Reader, namespace: str) -> None:
    pods = (
        found.read(
            f"list operator pods in {namespace}", partial(reader.pods, namespace, OPERATOR_PODS)
        )
        or []
    )
    if not pods:
        found.notes.append(f"no operator pods ({OPERATOR_PODS}) in {namespace}")
    found.files["pods-operator.yaml"] = dump([slim_pod(p) for p in pods])
    for pod in pods[:10]:
        _logs(found, reader, namespace, pod, "logs/operator")


def _agent_logs(
    found: Collection, reader: Reader, namespace: str, report: status.Report, node: str | None
) -> None:
    """Agent logs of the nodes asked for, else of up to ``MAX_AGENT_LOGS`` nodes, those with
    a problem (failed, applying, waiting, no report, a handler not Ready) first."""
    pods = (
        found.read(f"list agent pods in {namespace}", partial(reader.pods, namespace, AGENT_PODS))
        or []
    )
    by_node = {(p.get("spec") or {}).get("nodeName"): p for p in pods}
    wanted = _troubled_first(report.nodes) if node is None else [node]
    found.files["pods-agent.yaml"] = dump([slim_pod(by_node[n]) for n in wanted if n in by_node])
    chosen = [n for n in wanted if n in by_node][:MAX_AGENT_LOGS]
    for name in chosen:
        _logs(found, reader, namespace, by_node[name], f"logs/agent/{name}")
    missing = [n for n in wanted if n not in by_node]
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        found.notes.append(f"no agent pod on {len(missing)} Windows node(s): {shown}")
    if len([n for n in wanted if n in by_node]) > MAX_AGENT_LOGS:
        found.notes.append(
            f"agent logs of {MAX_AGENT_LOGS} nodes only (troubled first); "
            "use --node NAME for another"
        )


def _troubled_first(nodes: Sequence[status.NodeLine]) -> list[str]:
    def trouble(line: status.NodeLine) -> int:
        if line.rollout in ("failed", status.NO_REPORT):
            return 0
        if any(not s.startswith(("Ready", "NotEligible")) for s in line.handlers.values()):
            return 1
        return 2 if line.rollout in ("applying", "waiting") else 3

    return [n.name for n in sorted(nodes, key=lambda n: (trouble(n), n.name))]


def _readme(found: Collection, server: str, namespace: str, node: str | None, now: datetime) -> str:
    lines = [
        "kubectl wcow diagnose",
        f"collected: {now.isoformat(timespec='seconds')}",
        f"server:    {server}",
        f"namespace: {namespace} (the operator's: plan, rollout, Lease, pods)",
        f"node:      {node or 'all Windows nodes'}",
        "Credentials (tokens, passwords, private keys) are replaced by REDACTED.",
        "",
        "files:",
        *(f"  {name}" for name in sorted([*found.files, "README.txt"])),
        "",
        "could not read:" if found.problems else "everything was read.",
        *(f"  {problem}" for problem in found.problems),
        *(["", "notes:"] if found.notes else []),
        *(f"  {note}" for note in found.notes),
    ]
    return "\n".join(lines) + "\n"
