"""The plan: each live profile's entry (or why it has none: the Planned condition), the plan
fitted under the ConfigMap's size limit, and the plan ConfigMap's write.

A valid profile's entry is what the renderer makes of its spec; an invalid one keeps its last
good entry; a held-back one (``reconcile.holds``) its last rolled-out entry or none; handlers
claimed by more than one profile are in no plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wcow_contract.wire.canonical import canonical_json
from wcow_contract.wire.plan import PLAN_KEY, Plan, PlanEntry, plan_with_text
from wcow_contract.wire.rollout import Hold
from wcow_operator.reconcile.holds import ROLLED_OUT_KEY, Record, dump_record
from wcow_operator.reconcile.model import Observed, ReconcileSettings, Row, Write
from wcow_operator.reconcile.profiles import Profiles, ProfileState
from wcow_operator.render.configmaps import plan_config_map

# A hold, and the (handler, entry) the plan keeps instead (None: none).
Held = tuple[Hold, tuple[str, PlanEntry] | None]


@dataclass(frozen=True)
class PlanEntries:
    """The plan's entries by handler, and each live profile's Planned row."""

    entries: dict[str, PlanEntry]
    planned: dict[str, Row]


@dataclass(frozen=True)
class FittedPlan:
    """The plan to write, its view and canonical JSON (each worked out once: at 500
    handlers the JSON is 273 KB), and the handlers left out to fit, with their row."""

    plan: Plan
    view: dict[str, Any]
    text: str
    waiting: Mapping[str, Row]


def plan_entries(
    profiles: Profiles,
    holds: Mapping[str, Held],
    entry_of: Callable[[ProfileState], PlanEntry],
) -> PlanEntries:
    """Every live profile's place in the plan. ``holds``: the held-back profiles by name."""
    entries: dict[str, PlanEntry] = {}
    planned: dict[str, Row] = {}
    claimed = {h for state in profiles.live if (h := state.claimed_handler) is not None}
    for state in profiles.live:
        handler = state.claimed_handler
        conflict = profiles.conflict(state)
        if handler is None:
            planned[state.name] = (
                "False",
                "InvalidSpec",
                "not in the plan until the spec is valid",
            )
        elif conflict is not None:
            planned[state.name] = ("False", "HandlerConflict", conflict)
        elif state.name in holds:
            kept, planned[state.name] = _held_entry(holds[state.name], claimed)
            if kept is not None:
                entries[kept[0]] = kept[1]
        elif state.model is not None:
            entries[handler] = entry_of(state)
            planned[state.name] = ("True", "InPlan", f"handler {handler} is in the plan")
        elif state.last_good is not None:
            entries[handler] = state.last_good[1]
            generation = state.last_good[1].generation
            planned[state.name] = (
                "True",
                "LastGoodKept",
                f"the spec is invalid; the last valid version (generation {generation}) "
                "stays in the plan",
            )
    return PlanEntries(entries, planned)


def _held_entry(held: Held, claimed: set[str]) -> tuple[tuple[str, PlanEntry] | None, Row]:
    """A held-back profile's place in the plan: its last rolled-out entry, or none."""
    hold, kept = held
    message = f"generation {hold.generation} failed on nodes and is held back"
    if kept is None or (kept[0] != hold.handler and kept[0] in claimed):
        return None, (
            "False",
            "HeldBack",
            f"{message}; it never rolled out, so it is out of the plan until the spec changes "
            "or the rollout is resumed",
        )
    handler, entry = kept
    return kept, (
        "True",
        "HeldBack",
        f"{message}; the plan keeps generation {entry.generation} (handler {handler}), its "
        "last rolled-out version",
    )


def fit_plan(
    entries: dict[str, PlanEntry],
    observed_plan: Mapping[str, Any] | None,
    settings: ReconcileSettings,
) -> FittedPlan:
    """The plan of ``entries``. Over the size limit, entries the nodes already have stay,
    then new and changed ones are added by handler name while they fit; the rest wait and
    their profiles say why. (Never an emptier plan than needed: agents remove what leaves
    it.)"""
    plan, view, text = plan_with_text(entries)
    size = len(text.encode("utf-8"))
    if size <= settings.plan_max_bytes:
        return FittedPlan(plan, view, text, {})
    previous = (observed_plan or {}).get("handlers") or {}
    kept = {h: e for h, e in entries.items() if previous.get(h) == e.view()}
    room = settings.plan_max_bytes - len(plan_with_text(kept)[2].encode("utf-8"))
    for handler in sorted(set(entries) - set(kept)):
        # '"h":{...}' and a comma
        cost = len(canonical_json({handler: entries[handler].view()})) - 1
        if cost <= room:
            kept[handler] = entries[handler]
            room -= cost
    message = (
        f"the plan would be {size} bytes, over the {settings.plan_max_bytes}-byte limit "
        "(a ConfigMap holds 1 MiB); this profile waits. Remove unused profiles"
    )
    row: Row = ("False", "PlanTooLarge", message)
    waiting = {handler: row for handler in entries if handler not in kept}
    return FittedPlan(*plan_with_text(kept), waiting)


def planned_rows(profiles: Profiles, placed: PlanEntries, fitted: FittedPlan) -> dict[str, Row]:
    """Each live profile's Planned row, once the plan is fitted."""
    rows = {}
    for state in profiles.live:
        handler = state.claimed_handler
        waiting = fitted.waiting.get(handler) if handler is not None else None
        rows[state.name] = waiting or placed.planned[state.name]
    return rows


def plan_writes(
    fitted: FittedPlan, observed: Observed, namespace: str, record: Record
) -> list[Write]:
    """The plan ConfigMap's write when the plan changed, with the record of what its
    rollout's handlers had before (``reconcile.holds``), which is written only with it."""
    config_map = plan_config_map(fitted.plan, namespace, paced=True, text=fitted.text)
    if record:
        config_map["data"][ROLLED_OUT_KEY] = dump_record(record)
    current = observed.plan_config_map or {}
    same_data = (current.get("data") or {}).get(PLAN_KEY) == fitted.text
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    wanted = config_map["metadata"]["annotations"]
    if same_data and all(annotations.get(k) == v for k, v in wanted.items()):
        return []
    name = config_map["metadata"]["name"]
    return [Write("write-plan", name, config_map, observed=observed.plan_config_map)]
