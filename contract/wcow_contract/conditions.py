"""Status conditions by the Kubernetes API conventions, changed only through ``set_condition``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from wcow_contract.v1alpha1 import Condition, ConditionStatus

# Condition types a profile reports.
VALID = "Valid"
PLANNED = "Planned"
RUNTIME_CLASS_READY = "RuntimeClassReady"
NODES_READY = "NodesReady"
READY = "Ready"
ROLLED_OUT = "RolledOut"
# The two "abnormal-true" types of kstatus (sigs.k8s.io/cli-utils v0.37.2,
# pkg/kstatus/status/status.go), which Flux's health checks read.
RECONCILING = "Reconciling"
STALLED = "Stalled"


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    *,
    status: ConditionStatus,
    reason: str,
    message: str,
    observed_generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Conditions with ``type_`` set. ``lastTransitionTime`` moves only when the status
    changes; reason, message and generation are updated in place. Order is kept, a new
    type is appended."""
    updated: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != type_:
            updated.append(condition)
            continue
        found = True
        changed = condition.status != status
        updated.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                observed_generation=observed_generation,
                last_transition_time=(
                    timestamp(now) if changed else condition.last_transition_time
                ),
            )
        )
    if not found:
        updated.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                observed_generation=observed_generation,
                last_transition_time=timestamp(now),
            )
        )
    return updated


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)
