"""A failing profile holds back only itself.

One plan carries every profile's change, and a node takes the whole plan. So when a node
reports a changed handler Failed, the operator does not stop the plan: it holds that
handler back. The plan it writes next has the handler's last rolled-out entry (or leaves it
out if it never rolled out); that plan is a new rollout, paced like any other, which takes
the failing change back off the nodes that took it and carries every other profile's
change to every node. The hold, with the entry it puts back, lives in the rollout ConfigMap
(``wcow_contract.wire.rollout.Hold``), so a new leader keeps it.

Where the last rolled-out entry comes from: when the operator writes a plan, it writes beside
it (key ``rolled-out.json`` of the plan ConfigMap, which agents do not read) the entry each
handler of the new rollout had in the last plan every node reached (null: none). A hold
copies its handler's entry from there. Without one (a plan an older operator wrote, a
record over the size limit, an entry this renderer would not write again) the failure
halts the whole rollout, as failures no handler accounts for do (a node silent past the
timeout, a drain that timed out).

A hold ends when the profile's generation changes (a fixed spec: its new entry goes out), its
resume annotation gets a new value (the held change goes out again), or the profile goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from wcow_contract.conditions import timestamp
from wcow_contract.wire.canonical import canonical_json
from wcow_contract.wire.plan import PlanEntry
from wcow_contract.wire.plan_check import EntryRefusedError, checked_entry
from wcow_contract.wire.rollout import Hold, Rollout
from wcow_operator.reconcile.rollout_decision import (
    MAX_LISTED,
    NodeReport,
    Progress,
    carried,
    changed_handlers,
)

ROLLED_OUT_KEY: Final = "rolled-out.json"
Record = dict[str, dict[str, Any] | None]  # handler -> its last rolled-out entry (None: none)


@dataclass(frozen=True)
class Claim:
    """A live profile's claim on a handler, as a hold is judged against it."""

    handler: str
    uid: str | None
    generation: int | None
    resume: str | None  # its resume annotation's value


def read_record(config_map: Mapping[str, Any] | None) -> Record:
    """The record written beside the plan; empty when absent or unreadable (then nothing
    can be held back: a failure halts the whole rollout)."""
    text = ((config_map or {}).get("data") or {}).get(ROLLED_OUT_KEY)
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {
        h: e for h, e in found.items() if isinstance(h, str) and (e is None or isinstance(e, dict))
    }


def dump_record(record: Record) -> str:
    return canonical_json(record).decode("utf-8")


def next_record(
    plan: Mapping[str, Any],
    previous_plan: Mapping[str, Any] | None,
    record: Record,
    last: Rollout | None,
    *,
    reports: Mapping[str, NodeReport],
    room: int,
) -> Record:
    """The record to write with ``plan``: for each handler its rollout changes, the entry it
    had in the last plan every node reached. When not every node (``reports``) runs the
    previous plan, a handler its rollout changed keeps what the record said (nodes may still
    run that); the others take the previous plan's entry. Entries are kept by handler name
    while they fit in ``room`` bytes; the rest are unknown (their failure halts the
    rollout)."""
    if previous_plan is not None and previous_plan.get("hash") == plan.get("hash"):
        return record
    before = (previous_plan or {}).get("handlers") or {}
    previous = (previous_plan or {}).get("hash")
    finished = all(
        r.applied_plan_hash == previous and r.attempted_plan_hash in (None, previous)
        for r in reports.values()
    )
    kept = frozenset() if finished else carried(previous_plan, last, len(reports))
    found: Record = {}
    for handler in sorted(changed_handlers(previous_plan, plan) | kept):
        if handler in kept:
            if handler in record:
                found[handler] = record[handler]
            continue
        entry = before.get(handler)
        found[handler] = entry if isinstance(entry, dict) else None
    fitted: Record = {}
    for handler, entry in found.items():
        cost = len(canonical_json({handler: entry})) + 1
        if cost <= room:
            fitted[handler] = entry
            room -= cost
    return fitted


def trusted(
    handler: str, entry: Mapping[str, Any], profile: str, uid: str | None
) -> PlanEntry | None:
    """The entry, typed, if the operator may put it in the plan again: it names this
    profile and its uid, and is exactly what this renderer makes of the spec it carries (an
    agent checks the same, and refuses a plan with an entry that is not)."""
    if entry.get("profile") != profile or entry.get("uid") != uid:
        return None
    try:
        return checked_entry(handler, dict(entry))
    except (EntryRefusedError, ValidationError):
        return None


def kept_entry(profile: str, hold: Hold) -> tuple[str, PlanEntry] | None:
    """The (handler, entry) a hold keeps in the plan; None: none (it never rolled out)."""
    if hold.entry is None or hold.entry_handler is None:
        return None
    entry = trusted(hold.entry_handler, hold.entry, profile, hold.uid)
    return None if entry is None else (hold.entry_handler, entry)


def standing(held: Mapping[str, Hold], claims: Mapping[str, Claim]) -> dict[str, Hold]:
    """The holds that still stand (profile -> hold): the profile (same uid) still claims the
    handler, at the generation and with the resume annotation it had when held, and the
    entry it keeps is still one to write."""
    kept: dict[str, Hold] = {}
    for profile, hold in held.items():
        claim = claims.get(profile)
        if claim is None or (claim.uid, claim.handler) != (hold.uid, hold.handler):
            continue  # deleted (or made again), or its handler changed
        if (claim.generation, claim.resume) != (hold.generation, hold.resumed_by):
            continue  # a new spec, or resumed: the change goes out (again)
        if hold.entry is not None and kept_entry(profile, hold) is None:
            continue
        kept[profile] = hold
    return kept


def _last_entry(record: Record, profile: str, uid: str | None) -> tuple[str, dict[str, Any]] | None:
    """The profile's entry in the record, under whichever handler it had."""
    for handler, entry in sorted(record.items()):
        if entry is not None and (entry.get("profile"), entry.get("uid")) == (profile, uid):
            return handler, entry
    return None


def hold_back(
    progress: Progress,
    plan: Mapping[str, Any],
    record: Record,
    claims: Mapping[str, Claim],
    *,
    held: Mapping[str, Hold],
    now: datetime,
) -> dict[str, Hold]:
    """The profiles to hold back (profile -> hold) for the halt this pass found, or none
    when it cannot be (then the whole rollout halts): a failure no handler accounts for, a
    profile already held (its last rolled-out entry fails), or one without a known last
    entry to go back to."""
    if not progress.halted_now or progress.unattributed or not progress.culprits:
        return {}
    by_handler = {claim.handler: name for name, claim in claims.items()}
    entries = plan.get("handlers") or {}
    holds: dict[str, Hold] = {}
    for handler, failures in sorted(progress.culprits.items()):
        profile = by_handler.get(handler)
        if profile is None or profile in held or handler not in record:
            return {}
        claim = claims[profile]
        last = _last_entry(record, profile, claim.uid)
        if last is not None and (
            trusted(*last, profile, claim.uid) is None or last[1] == entries.get(last[0])
        ):
            return {}
        holds[profile] = Hold(
            handler=handler,
            uid=claim.uid,
            generation=claim.generation,
            plan_hash=str(plan["hash"]),
            entry_handler=last[0] if last else None,
            entry=last[1] if last else None,
            resumed_by=claim.resume,
            reason="NodeFailed",
            message=_message(handler, failures),
            since=timestamp(now),
            nodes=list(failures[:MAX_LISTED]),
        )
    return holds


def _message(handler: str, failures: tuple[Any, ...]) -> str:
    names = ", ".join(f"{f.node} ({f.reason})" for f in failures[:MAX_LISTED])
    first = failures[0]
    # At most 400 of the node's words: the status adds what happens and how to resume.
    return f"the change of handler {handler} failed on {names}; {first.node}: {first.message[:400]}"
