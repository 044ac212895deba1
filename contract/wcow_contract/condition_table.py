"""Every condition type a profile carries and every reason it can give, as data: the
conditions table of docs/reference/conditions.md is rendered from it (``wcow crd
--conditions``), and tests/controller/test_kstatus.py checks that the reconcile core produces
exactly these reasons, so neither table nor code can drift."""

from __future__ import annotations

from dataclasses import dataclass

from wcow_contract.conditions import (
    NODES_READY,
    PLANNED,
    READY,
    RECONCILING,
    ROLLED_OUT,
    RUNTIME_CLASS_READY,
    STALLED,
    VALID,
)
from wcow_contract.v1alpha1 import ConditionStatus


@dataclass(frozen=True)
class Reason:
    name: str
    status: ConditionStatus
    note: str = ""


@dataclass(frozen=True)
class ConditionKind:
    type: str
    true_when: str
    reasons: tuple[Reason, ...]


# Reasons that need a person: with one of them the profile is Stalled (kstatus: Failed).
STALLING = (
    "InvalidSpec",
    "HandlerConflict",
    "PlanTooLarge",
    "RuntimeClassConflict",
    "RolloutHalted",
    "NoEligibleNodes",
    "NodesFailed",
)
# Reasons of a change still under way: Reconciling (kstatus: InProgress).
UNDER_WAY = ("RollingOut", "NodesPending", "RuntimeClassWriteFailed")

_NOT_READY = (
    Reason("InvalidSpec", "False"),
    Reason("HandlerConflict", "False"),
    Reason("PlanTooLarge", "False"),
    Reason("HeldBack", "False"),
    Reason("RuntimeClassConflict", "False"),
    Reason("RuntimeClassWriteFailed", "False"),
    Reason("NoEligibleNodes", "False"),
    Reason("NodesPending", "False"),
    Reason("NodesFailed", "False"),
)

CONDITIONS: tuple[ConditionKind, ...] = (
    ConditionKind(
        VALID,
        "the spec passes every rule",
        (
            Reason("SpecValid", "True"),
            Reason(
                "InvalidSpec",
                "False",
                "the message names the field and value; the last "
                "good RuntimeClass and plan entry stay",
            ),
        ),
    ),
    ConditionKind(
        PLANNED,
        "the handler is in the plan",
        (
            Reason("InPlan", "True"),
            Reason("LastGoodKept", "True", "the spec is invalid; its last valid version stays"),
            Reason(
                "HeldBack",
                "True",
                "its change failed on a node and is held back; its last rolled-out version stays",
            ),
            Reason("InvalidSpec", "False"),
            Reason("HandlerConflict", "False", "two profiles claim one handler"),
            Reason("PlanTooLarge", "False", "the plan is at its size limit"),
            Reason("HeldBack", "False", "held back, and it never rolled out"),
        ),
    ),
    ConditionKind(
        RUNTIME_CLASS_READY,
        "the owned RuntimeClass matches the spec",
        (
            Reason("RuntimeClassApplied", "True"),
            Reason("LastGoodKept", "True", "the spec is invalid; the RuntimeClass is left"),
            Reason(
                "RuntimeClassConflict", "False", "a RuntimeClass of that name is not the profile's"
            ),
            Reason("HandlerConflict", "False"),
            Reason("InvalidSpec", "False"),
            Reason("RuntimeClassWriteFailed", "False", "retried"),
        ),
    ),
    ConditionKind(
        NODES_READY,
        "every eligible node's agent proved the handler",
        (
            Reason("AllEligibleNodesReady", "True"),
            Reason("NoEligibleNodes", "False", "no Windows node with an agent can run it"),
            Reason("NodesPending", "False"),
            Reason("NodesFailed", "False", "node and reason in `status.failures`"),
        ),
    ),
    ConditionKind(
        READY,
        "Valid, Planned, RuntimeClassReady and NodesReady (this one only with "
        "`requireReadyLabel`) are True: pods can use the class; else the first failing "
        "one's reason",
        (Reason("Ready", "True"), *_NOT_READY),
    ),
    ConditionKind(
        ROLLED_OUT,
        "every Windows node runs the plan with this handler's last change (never gates Ready)",
        (
            Reason("NoChangePending", "True"),
            Reason("RolloutComplete", "True"),
            Reason("RollingOut", "False", "nodes take the change a few at a time"),
            Reason(
                "RolloutHalted",
                "False",
                "a node failed or timed out; the message names it and how to resume",
            ),
        ),
    ),
    ConditionKind(
        RECONCILING,
        "a change is still under way: nodes are rolling out or proving the handler "
        "(kstatus: InProgress; `NodesPending` only with `requireReadyLabel`)",
        (
            Reason("RollingOut", "True"),
            Reason("NodesPending", "True"),
            Reason("RuntimeClassWriteFailed", "True"),
            Reason("Stalled", "False", "it needs a person instead: see Stalled"),
            Reason("Reconciled", "False"),
        ),
    ),
    ConditionKind(
        STALLED,
        "progress needs a person; the reason and message are the blocking condition's "
        "(kstatus: Failed; the node reasons only with `requireReadyLabel`)",
        (
            *(Reason(name, "True") for name in STALLING),
            Reason("Progressing", "False", "see Reconciling"),
            Reason("Reconciled", "False"),
        ),
    ),
)


def markdown_table() -> str:
    """The conditions table of docs/reference/conditions.md."""
    lines = ["| type | True when | reasons |", "| --- | --- | --- |"]
    for kind in CONDITIONS:
        groups = []
        for status in ("True", "False"):
            names = [
                f"`{r.name}`" + (f" ({r.note})" if r.note else "")
                for r in kind.reasons
                if r.status == status
            ]
            if names:
                groups.append(f"{status}: {', '.join(names)}")
        lines.append(f"| `{kind.type}` | {kind.true_when} | {'; '.join(groups)} |")
    return "\n".join(lines) + "\n"
