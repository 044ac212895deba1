"""The one reconcile: observed cluster + profiles -> the writes that make them match.

Pure: no API calls, no clock (``now`` is passed in). Called for every event and on a timer;
with nothing changed it returns no writes and no events.

A pass is a sequence of steps, each a module that returns what it decides (writes, Events,
a condition's row per profile) and changes nothing a later step reads:

1. ``profiles``: the live profiles parsed, the last good entry of invalid ones, conflicts;
2. ``plan_and_rollout``: the plan (``planning``: entries, Planned, size limit) and who may
   change to it now (``rollout_decision``, ``holds``, ``drain``);
3. ``runtime_classes``: each profile's RuntimeClass write and RuntimeClassReady;
4. ``deleted_profiles``: the finalizers of earlier versions let go;
5. ``profile_status``: the conditions from those rows, the status writes and their Events.
"""

from __future__ import annotations

from datetime import datetime

from wcow_operator.reconcile.deleted_profiles import deletion_writes
from wcow_operator.reconcile.model import Observed, Outcome, ReconcileSettings
from wcow_operator.reconcile.plan_and_rollout import plan_and_rollout, rollout_writes
from wcow_operator.reconcile.planning import plan_writes
from wcow_operator.reconcile.profile_status import Decided, profile_statuses
from wcow_operator.reconcile.profiles import Memo, read_profiles
from wcow_operator.reconcile.runtime_classes import runtime_classes


def reconcile(
    observed: Observed, settings: ReconcileSettings, now: datetime, memo: Memo | None = None
) -> Outcome:
    """Everything to write for the observed state, in the phases the controller runs.
    ``memo``: what earlier passes worked out (see ``Memo``); it is updated to this pass."""
    earlier, current = memo or Memo(), Memo()  # this pass's profiles only: deleted ones go
    profiles = read_profiles(observed, settings, earlier, current)
    planned = plan_and_rollout(
        profiles, observed, settings, now, entry_of=lambda s: current.entry(s, earlier)
    )
    classes = runtime_classes(profiles, observed, planned.planned)
    decided = {
        name: Decided(planned.planned[name], rc.row, rc.owned, planned.holds.get(name))
        for name, rc in classes.items()
    }
    plan = planned.fitted.view
    statuses = profile_statuses(
        profiles, decided, observed, now,
        progress=planned.progress, plan=plan, earlier=earlier, memo=current,
    )  # fmt: skip
    writes = [write for rc in classes.values() for write in rc.writes]
    writes += plan_writes(planned.fitted, observed, settings.namespace, planned.record)
    writes += rollout_writes(planned.rollout, observed, settings.namespace)
    writes += deletion_writes(observed)
    writes += statuses.writes
    if memo is not None:
        memo.keep(current)
    return Outcome(
        writes=writes,
        events=[*(event for rc in classes.values() for event in rc.events), *statuses.events],
        statuses=statuses.statuses,
        plan=plan,
        plan_bytes=len(planned.fitted.text.encode("utf-8")),
        rollout=planned.progress,
        drain=planned.drain,
    )
