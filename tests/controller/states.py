"""Profiles in every state the reconcile core can produce, as the API server stores them:
each is driven through the pure reconcile with its writes applied. Judged by kstatus
(tests/controller/test_kstatus.py) and Argo CD's health check (tests/argocd.py)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from tests.controller.builders import NAMESPACE, observed, profile_body
from tests.controller.test_reconcile import apply
from wcow_contract.wire.plan import PLAN_KEY
from wcow_operator.reconcile.model import Observed, ObservedNode, ReconcileSettings
from wcow_operator.reconcile.profile_status import runtime_class_failed
from wcow_operator.reconcile.reconciler import reconcile

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = ReconcileSettings(namespace=NAMESPACE, max_unavailable=1)
Body = dict[str, Any]


def node(name: str, applied: str | None, attempted: str | None = None, hv: str = "Ready") -> Any:
    status = {
        "schemaVersion": 1,
        "hostBuild": "10.0.20348",
        "hypervAvailable": True,
        "appliedPlanHash": applied,
        "attemptedPlanHash": attempted or applied,
        "handlers": {"hv": {"state": hv, "reason": f"R{hv}", "message": f"{hv} on {name}"}},
    }
    labels = {"kubernetes.io/os": "windows"}
    if hv == "Ready":
        labels["runtime.wcow.dev/hv"] = "ready"
    return ObservedNode(name, labels, json.dumps(status), "10.0.20348")


def settle(state: Observed, settings: ReconcileSettings = SETTINGS) -> Observed:
    for _ in range(5):
        outcome = reconcile(state, settings, NOW)
        if not outcome.writes:
            return state
        state = apply(state, outcome)
    raise AssertionError("reconcile did not settle")


def with_nodes(state: Observed, nodes: list[ObservedNode]) -> Observed:
    return Observed(
        profiles=state.profiles,
        runtime_classes=state.runtime_classes,
        plan=state.plan,
        plan_config_map=state.plan_config_map,
        nodes=nodes,
        rollout_config_map=state.rollout_config_map,
    )


def plan_hash(state: Observed) -> str:
    assert state.plan_config_map is not None
    return str(json.loads(state.plan_config_map["data"][PLAN_KEY])["hash"])


def body(state: Observed, name: str = "hv") -> Body:
    return copy.deepcopy(next(p.body for p in state.profiles if p.name == name))


def new_without_nodes() -> Body:
    return body(settle(observed(profile_body("hv"))))


def ungated_without_nodes() -> Body:
    return body(settle(observed(profile_body("hv", scheduling={"requireReadyLabel": False}))))


def rolling() -> Body:
    nodes = [node(f"n{i}", None, hv="Pending") for i in range(3)]
    return body(settle(observed(profile_body("hv"), nodes=nodes)))


def rolled(hv_of_n0: str) -> Observed:
    state = settle(observed(profile_body("hv"), nodes=[node(f"n{i}", None) for i in range(3)]))
    current = plan_hash(state)
    n0 = node("n0", None, current, hv="Failed") if hv_of_n0 == "Failed" else node("n0", current)
    return settle(with_nodes(state, [n0, *(node(f"n{i}", current) for i in (1, 2))]))


def healthy() -> Body:
    return body(rolled("Ready"))


def halted() -> Body:
    return body(rolled("Failed"))


def nodes_failed_at_rest() -> Body:
    """The rollout finished; later a node's agent reports the handler failed (its canary)."""
    state = rolled("Ready")
    current = plan_hash(state)
    nodes = [node("n0", current, hv="Failed"), node("n1", current), node("n2", current)]
    return body(settle(with_nodes(state, nodes)))


def invalid_last_good_kept() -> Body:
    state = rolled("Ready")
    bad = profile_body("hv", generation=2, status=body(state)["status"], vm={"memoryMB": 3})
    return body(
        settle(
            observed(
                bad,
                runtime_classes=list(state.runtime_classes.values()),
                plan_config_map=state.plan_config_map,
                rollout_config_map=state.rollout_config_map,
                nodes=state.nodes,
            )
        )
    )


def invalid_new() -> Body:
    return body(settle(observed(profile_body("hv", vm={"memoryMB": 3}))))


def handler_conflict() -> Body:
    state = observed(profile_body("a", handler="shared"), profile_body("hv", handler="shared"))
    return body(settle(state))


def runtime_class_conflict() -> Body:
    foreign = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "hv", "resourceVersion": "3"},
        "handler": "other",
    }
    return body(settle(observed(profile_body("hv"), runtime_classes=[foreign])))


def plan_too_large() -> Body:
    state = settle(observed(profile_body("a")))
    assert state.plan_config_map is not None
    small = ReconcileSettings(
        namespace=NAMESPACE, plan_max_bytes=len(state.plan_config_map["data"][PLAN_KEY]) + 10
    )
    grown = observed(
        *[p.body for p in state.profiles],
        profile_body("hv"),
        runtime_classes=list(state.runtime_classes.values()),
        plan_config_map=state.plan_config_map,
        rollout_config_map=state.rollout_config_map,
    )
    return body(settle(grown, small))


def generation_not_yet_seen() -> Body:
    changed = healthy()
    changed["metadata"]["generation"] = 2
    changed["spec"]["vm"] = {"memoryMB": 4096}
    return changed


def runtime_class_write_failed() -> Body:
    changed = healthy()
    changed["status"] = runtime_class_failed(changed["status"], OSError("503"), NOW)
    return changed


def not_yet_seen() -> Body:
    return profile_body("hv")


def deleting() -> Body:
    gone = healthy()
    gone["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    return gone
