"""Reconciling and Stalled from the other conditions: what kstatus (and so Flux's health
checks) and Argo CD's health check read.

kstatus (sigs.k8s.io/cli-utils v0.37.2, pkg/kstatus/status/generic.go
``checkGenericProperties``) makes a resource Failed on ``Stalled=True`` and InProgress on
``Reconciling=True``, whichever comes first in the list, so at most one of them is True here.
Without either it falls back to ``Ready``, which stays True through a rollout (nodes not yet
changed keep the last plan): without Reconciling a rolling profile would read Current, and
without Stalled a halted one would read InProgress until a GitOps tool's timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

from wcow_contract.condition_table import STALLING, UNDER_WAY
from wcow_contract.conditions import NODES_READY, READY
from wcow_operator.reconcile.model import Row


def reconciling_and_stalled(
    rows: Sequence[tuple[str, Row]], *, nodes_gate: bool
) -> tuple[Row, Row]:
    """(Reconciling, Stalled) for the conditions ``rows`` (type, (status, reason, message)),
    in their order: the first row that needs a person stalls the profile, with its reason and
    message; else the first row of a change under way makes it Reconciling. Node rows count
    only when nodes gate Ready (``requireReadyLabel``): an ungated profile's pods do not wait
    for agents, and a cluster without agents must not read as failed forever."""
    counted = [
        (type_, row)
        for type_, row in rows
        if row[0] != "True" and type_ != READY and (type_ != NODES_READY or nodes_gate)
    ]
    # A halted rollout outranks the node rows it is about: its message says how to resume.
    counted.sort(key=lambda item: item[0] == NODES_READY)
    stalled = next((row for type_, row in counted if row[1] in STALLING), None)
    if stalled is not None:
        _, reason, message = stalled
        return ("False", "Stalled", f"stalled: {reason}"), ("True", reason, message or reason)
    under_way = next((row for type_, row in counted if row[1] in UNDER_WAY), None)
    if under_way is not None:
        _, reason, message = under_way
        return ("True", reason, message or reason), ("False", "Progressing", "see Reconciling")
    done = "the spec's generation is applied and nothing is under way"
    return ("False", "Reconciled", done), ("False", "Reconciled", done)
