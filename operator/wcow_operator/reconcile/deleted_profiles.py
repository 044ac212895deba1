"""Profiles being deleted: what the operator still does for them.

A deleted profile is not held by a finalizer: the plan is recomputed from the profiles that
exist, and its RuntimeClass carries a controller reference, so the garbage collector deletes
it (not when deleted with ``--cascade=orphan``). A profile that still carries the finalizer
of earlier versions (``FINALIZER``) is let go once the plan without its entry is written, its
RuntimeClass deleted first, as those versions did.
"""

from __future__ import annotations

from wcow_operator.reconcile.model import FINALIZER, Observed, Write
from wcow_operator.reconcile.runtime_classes import controlled_by


def deletion_writes(observed: Observed) -> list[Write]:
    """The writes that let go the deleted profiles carrying the finalizer of earlier
    versions, each after the plan write."""
    writes: list[Write] = []
    for profile in observed.profiles:
        if not profile.deleting or FINALIZER not in profile.finalizers:
            continue
        observed_rc = observed.runtime_classes.get(profile.name)
        if observed_rc is not None and controlled_by(observed_rc, profile):
            writes.append(
                Write("delete-runtime-class", profile.name, observed=observed_rc, after_plan=True)
            )
        writes.append(
            Write("remove-finalizer", profile.name, observed=profile.body, after_plan=True)
        )
    return writes
