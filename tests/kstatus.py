"""kstatus's rules for a custom resource, copied as a table: how Flux's health checks (and
``kubectl`` tools built on cli-utils) read a WindowsRuntimeProfile.

Source: sigs.k8s.io/cli-utils v0.37.2 (commit 0a569f59), pkg/kstatus/status/status.go
``Compute`` and ``checkReadyCondition``, pkg/kstatus/status/generic.go
``checkGenericProperties`` and ``checkGeneration``; unchanged on master as of 2025-10
(5895ad6c). A custom kind has no entry in core.go's ``legacyTypes``, so only these rules
apply, in this order; the first that matches decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Object = Mapping[str, Any]


def _conditions(obj: Object) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _first_abnormal(obj: Object) -> Mapping[str, Any] | None:
    """generic.go loops over status.conditions in order and returns on the first
    Reconciling=True or Stalled=True."""
    return next(
        (
            c
            for c in _conditions(obj)
            if c.get("type") in ("Reconciling", "Stalled") and c.get("status") == "True"
        ),
        None,
    )


def _ready(obj: Object) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == "Ready"), None)


def _generation_not_observed(obj: Object) -> bool:
    generation = (obj.get("metadata") or {}).get("generation")
    status = obj.get("status") or {}
    # checkGeneration: only when both are present.
    return (
        generation is not None
        and "observedGeneration" in status
        and (status["observedGeneration"] != generation)
    )


# (rule, file and function, test, kstatus status)
RULES: tuple[tuple[str, str, Callable[[Object], bool], str], ...] = (
    (
        "metadata.deletionTimestamp is set",
        "generic.go checkGenericProperties",
        lambda o: bool((o.get("metadata") or {}).get("deletionTimestamp")),
        "Terminating",
    ),
    (
        "status.observedGeneration is present and differs from metadata.generation",
        "generic.go checkGeneration",
        _generation_not_observed,
        "InProgress",
    ),
    (
        "the first True of Reconciling/Stalled in status.conditions is Reconciling",
        "generic.go checkGenericProperties",
        lambda o: (c := _first_abnormal(o)) is not None and c["type"] == "Reconciling",
        "InProgress",
    ),
    (
        "the first True of Reconciling/Stalled in status.conditions is Stalled",
        "generic.go checkGenericProperties",
        lambda o: (c := _first_abnormal(o)) is not None and c["type"] == "Stalled",
        "Failed",
    ),
    (
        "Ready is True",
        "status.go checkReadyCondition",
        lambda o: (c := _ready(o)) is not None and c.get("status") == "True",
        "Current",
    ),
    (
        "Ready is False or Unknown",
        "status.go checkReadyCondition",
        lambda o: (c := _ready(o)) is not None and c.get("status") in ("False", "Unknown"),
        "InProgress",
    ),
    ("anything else", "status.go Compute", lambda o: True, "Current"),
)


def compute(obj: Object) -> tuple[str, str]:
    """(kstatus status, the rule that decided) for an object as the API server returns it."""
    for rule, _, test, result in RULES:
        if test(obj):
            return result, rule
    raise AssertionError("the last rule matches everything")
