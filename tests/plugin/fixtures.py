"""A cluster as ``kubectl wcow`` reads it: profiles, Windows Nodes with agent reports, the plan
and a halted rollout; and an in-memory ``Reader`` over it."""

from __future__ import annotations

import json
from typing import Any

from wcow_contract.wire.agent_status import (
    AGENT_STATUS_ANNOTATION,
    AgentStatus,
    HandlerStatus,
    dump_agent_status,
)
from wcow_contract.wire.rollout import Halt, Rollout, dump_rollout

__all__ = ["dump_rollout"]
from wcow_contract.v1alpha1 import NodeFailure
from wcow_operator.controller.cluster_api import ApiError

OLD, NEW = "sha256:" + "a" * 64, "sha256:" + "b" * 64
PLAN = {"hash": NEW, "handlers": {"hv": {"generation": 2}, "proc": {"generation": 1}}}
# The operator's namespace (the chart's default).
NS = "wcow-system"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"


def node(name: str, status: AgentStatus | None, **labels: str) -> dict[str, Any]:
    annotations = {AGENT_STATUS_ANNOTATION: dump_agent_status(status)} if status else {}
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/os": "windows", **labels},
            "annotations": annotations,
            "managedFields": [{"manager": "kubelet"}],
        },
        "status": {"nodeInfo": {"containerRuntimeVersion": "containerd://1.7.20"}},
    }


def agent(applied: str, attempted: str, hv: tuple[str, str, str], **extra: Any) -> AgentStatus:
    state, reason, message = hv
    return AgentStatus(
        host_build="10.0.20348",
        hyperv_available=True,
        containerd_version="1.7.20",
        applied_plan_hash=applied,
        attempted_plan_hash=attempted,
        handlers={
            "hv": HandlerStatus(
                state=state,  # type: ignore[arg-type]
                reason=reason,
                message=message,
                profile_generation=2,
            ),
            "proc": HandlerStatus(state="Ready", reason="CanaryPassed", profile_generation=1),
        },
        **extra,
    )


def nodes() -> list[dict[str, Any]]:
    """w1 done, w2 failed (halted the rollout), w3 let in, w4 waiting, w5 without a report."""
    build = {"node.kubernetes.io/windows-build": "10.0.20348"}
    return [
        node(
            "w1",
            agent(NEW, NEW, ("Ready", "CanaryPassed", "")),
            **build,
            **{
                "node.runtime.wcow.dev/guest-build-20348": "true",
                "node.runtime.wcow.dev/hyperv": "true",
                "node.runtime.wcow.dev/containerd-line": "1.7",
                "runtime.wcow.dev/hv": "ready",
            },
        ),
        node("w2", agent(OLD, NEW, ("Failed", "SandboxFailed", "hcs said no")), **build),
        node("w3", agent(OLD, OLD, ("Ready", "CanaryPassed", "")), **build),
        node(
            "w4",
            agent(OLD, OLD, ("Ready", "CanaryPassed", ""), waiting="the rollout has not let it in"),
            **build,
        ),
        node("w5", None, **build),
    ]


def rollout() -> Rollout:
    return Rollout(
        plan_hash=NEW,
        changed_handlers=["hv"],
        max_unavailable=2,
        permitted={"w1": "2026-11-25T01:00:00Z", "w2": "2026-11-25T01:00:00Z",
                   "w3": "2026-11-25T01:01:00Z"},
        halted=Halt(
            reason="NodeFailed",
            message="stopped after a node failed the change: w2 (SandboxFailed)",
            since="2026-11-25T01:02:00Z",
            nodes=[NodeFailure(node="w2", reason="SandboxFailed", message="hv: hcs said no")],
        ),
    )  # fmt: skip


def config_map(name: str, key: str, text: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "data": {key: text}}


def plan_map() -> dict[str, Any]:
    return config_map("wcow-runtime-plan", "plan.json", json.dumps(PLAN))


def rollout_map() -> dict[str, Any]:
    return config_map("wcow-runtime-rollout", "rollout.json", dump_rollout(rollout()))


def profiles() -> list[dict[str, Any]]:
    def condition(type_: str, status: str, reason: str) -> dict[str, str]:
        return {"type": type_, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-11-25T01:00:00Z"}  # fmt: skip

    return [
        {
            "metadata": {"name": "hv", "generation": 2},
            "spec": {"isolation": "HyperV", "windowsBuild": "ltsc2022"},
            "status": {
                "handler": "hv",
                "nodes": {"eligible": 4, "ready": 3, "failed": 1},
                "failures": [{"node": "w2", "reason": "SandboxFailed", "message": "hcs said no"}],
                "conditions": [
                    condition("Ready", "False", "NodesFailed"),
                    condition("RolledOut", "False", "RolloutHalted"),
                ],
            },
        },
        {
            "metadata": {"name": "proc", "generation": 1},
            "spec": {"isolation": "Process"},
            "status": {
                "handler": "proc",
                "nodes": {"eligible": 4, "ready": 4, "failed": 0},
                "conditions": [condition("Ready", "True", "Ready")],
            },
        },
    ]


class FakeReader:
    """The cluster above, as ``ClusterReader`` would return it; ``forbidden`` names the
    methods that answer 403, as for someone without the viewer roles."""

    server = "https://fake:6443"

    def __init__(self, forbidden: frozenset[str] = frozenset()) -> None:
        self.forbidden = forbidden
        self.logs: list[tuple[str, str, bool]] = []

    def _check(self, method: str) -> None:
        if method in self.forbidden:
            raise ApiError(403, "Forbidden", f"cannot {method}")

    def profiles(self) -> list[dict[str, Any]]:
        self._check("profiles")
        return profiles()

    def runtime_classes(self) -> list[dict[str, Any]]:
        self._check("runtime_classes")
        owner = {"kind": "WindowsRuntimeProfile", "name": "hv"}
        return [
            {"metadata": {"name": "hv", "ownerReferences": [owner]}, "handler": "hv"},
            {"metadata": {"name": "someone-elses"}, "handler": "runc"},
        ]

    def windows_nodes(
        self, name: str | None = None, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        self._check("windows_nodes")
        return [n for n in nodes() if name in (None, n["metadata"]["name"])]

    def plan_and_rollout(self, namespace: str) -> dict[str, dict[str, Any] | None]:
        self._check("plan_and_rollout")
        return {"wcow-runtime-plan": plan_map(), "wcow-runtime-rollout": rollout_map()}

    def leader_lease(self, namespace: str) -> dict[str, Any] | None:
        self._check("leader_lease")
        return {"metadata": {"name": "wcow-operator"}, "spec": {"holderIdentity": "op-1"}}

    def events(self, namespace: str, field_selector: str = "") -> list[dict[str, Any]]:
        self._check("events")
        kind = "Node" if "Node" in field_selector else "WindowsRuntimeProfile"
        return [{"type": "Warning", "reason": "RolloutHalted", "message": f"about a {kind}",
                 "involvedObject": {"kind": kind, "name": "x"},
                 "lastTimestamp": "2026-11-25T01:02:00Z"}]  # fmt: skip

    def pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self._check("pods")
        if "component=operator" in label_selector:
            return [pod("wcow-operator-1", "linux-1", "operator", restarts=1)]
        return [pod(f"agent-{n}", n, "agent") for n in ("w1", "w2", "w3", "w4")]

    def pod_log(self, namespace: str, pod: str, container: str, *, previous: bool) -> str:
        self._check("pod_log")
        self.logs.append((pod, container, previous))
        return f"log of {pod}/{container} previous={previous}\nAuthorization: Bearer {TOKEN}\n"

    def webhook_configurations(self) -> dict[str, dict[str, Any] | None]:
        self._check("webhook_configurations")
        return {"mutatingwebhookconfigurations": None, "validatingwebhookconfigurations": None}


def pod(name: str, node_name: str, container: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node_name, "containers": [{"name": container}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": container, "ready": True, "restartCount": restarts}],
        },
    }


def maps(plan: dict[str, Any] | None, rollout: dict[str, Any] | None) -> dict[str, Any]:
    """The ConfigMaps by name, as ``ClusterReader.plan_and_rollout`` gives them."""
    return {"wcow-runtime-plan": plan, "wcow-runtime-rollout": rollout}
