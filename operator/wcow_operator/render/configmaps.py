"""The ConfigMaps the operator writes: the plan (``wcow_contract.wire.plan``) and the rollout
(``wcow_contract.wire.rollout``), as Kubernetes objects."""

from __future__ import annotations

from typing import Any

from wcow_contract.wire.canonical import canonical_json
from wcow_contract.wire.plan import PLAN_CONFIGMAP, PLAN_HASH_ANNOTATION, PLAN_KEY, Plan
from wcow_contract.wire.rollout import (
    PACED_ANNOTATION,
    PACED_VALUE,
    ROLLOUT_CONFIGMAP,
    ROLLOUT_KEY,
    Rollout,
    dump_rollout,
)


def plan_config_map(
    plan: Plan, namespace: str, *, paced: bool = False, text: str | None = None
) -> dict[str, Any]:
    """The plan's ConfigMap. ``paced``: the operator's, whose rollout ConfigMap says which
    nodes may change; without it (``wcow render`` for GitOps) every node applies at once.
    ``text``: the plan's canonical JSON when the caller has it already."""
    annotations = {PLAN_HASH_ANNOTATION: plan.hash}
    if paced:
        annotations[PACED_ANNOTATION] = PACED_VALUE
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PLAN_CONFIGMAP,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "wcow-operator",
                "app.kubernetes.io/part-of": "wcow-runtime",
            },
            "annotations": annotations,
        },
        # Compact JSON: a ConfigMap holds at most 1 MiB, and agents parse it anyway.
        "data": {PLAN_KEY: canonical_json(plan.view()).decode("utf-8") if text is None else text},
    }


def rollout_config_map(rollout: Rollout, namespace: str) -> dict[str, Any]:
    """The rollout's ConfigMap (see ``wcow_contract.wire.rollout``)."""
    text = dump_rollout(rollout)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ROLLOUT_CONFIGMAP,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "wcow-operator",
                "app.kubernetes.io/part-of": "wcow-runtime",
            },
        },
        "data": {ROLLOUT_KEY: text},
    }
