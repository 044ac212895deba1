"""Builders of API objects as the apiserver returns them, for reconcile and controller tests."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.conftest import profile_document
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_operator.reconcile.model import Observed, ObservedNode, ObservedProfile

NAMESPACE = "wcow-system"


def profile_body(
    name: str = "hv",
    *,
    uid: str | None = None,
    generation: int = 1,
    finalizers: list[str] | None = None,
    deleting: bool = False,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body = profile_document(name, **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    body["metadata"].update(
        uid=uid or f"uid-{name}",
        generation=generation,
        resourceVersion="1",
        finalizers=[] if finalizers is None else finalizers,
    )
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if status is not None:
        body["status"] = copy.deepcopy(status)
    return body


def windows_node(
    name: str,
    handlers: dict[str, tuple[str, str]] | None = None,
    ready: tuple[str, ...] = (),
    *,
    build: str | None = "10.0.20348",
    reported_build: str | None = None,
    hyperv: bool = True,
    applied: str | None = None,
) -> ObservedNode:
    """A Windows node whose agent reports ``handlers`` (handler -> (state, reason)), on a host
    whose kubelet labels it ``build`` (the agent reports ``reported_build``, by default the
    same)."""
    labels = {"kubernetes.io/os": "windows"}
    labels.update({f"runtime.wcow.dev/{h}": "ready" for h in ready})
    status = None
    if handlers is not None:
        status = json.dumps(
            {
                "schemaVersion": 1,
                "hostBuild": reported_build or build or "10.0.20348",
                "hypervAvailable": hyperv,
                "appliedPlanHash": applied,
                "handlers": {
                    h: {"state": state, "reason": reason, "message": f"{reason} on {name}"}
                    for h, (state, reason) in handlers.items()
                },
            }
        )
    return ObservedNode(name=name, labels=labels, agent_status=status, build=build)


def observed(
    *profiles: dict[str, Any],
    runtime_classes: list[dict[str, Any]] | None = None,
    plan_config_map: dict[str, Any] | None = None,
    nodes: list[ObservedNode] | None = None,
    rollout_config_map: dict[str, Any] | None = None,
) -> Observed:
    plan = None
    if plan_config_map is not None:
        plan = json.loads(plan_config_map["data"]["plan.json"])
    return Observed(
        profiles=[ObservedProfile(p) for p in profiles],
        runtime_classes={rc["metadata"]["name"]: rc for rc in runtime_classes or []},
        plan=plan,
        plan_config_map=plan_config_map,
        nodes=nodes or [],
        rollout_config_map=rollout_config_map,
    )


def agent_annotation() -> str:
    return AGENT_STATUS_ANNOTATION
