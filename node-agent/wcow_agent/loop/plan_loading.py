"""Read the plan the operator (or ``wcow render``) wrote, refusing anything it would not write.

The hash proves the plan was not damaged, not who wrote it: anyone who can write the plan
ConfigMap (or hand ``merge`` a file) can re-hash a forged plan in one line. So an entry is
accepted only if it is exactly what the operator's renderer makes of the profile spec the
entry carries, after that spec passed the profile model: the agent renders the entry again
(``plan_entry``) and compares, key by key and type by type. There is no second list of
allowed keys to drift from the renderer; what a plan can make a node do is what a valid
profile can, and the model decides that (runtime type and path, runhcs options and their
values, annotations). A bad entry is refused naming its handler, field and value (bounded,
escaped), before any of it reaches config.toml.
"""

from __future__ import annotations

import json

from wcow_contract.text import shown
from wcow_contract.wire.plan import PLAN_KIND, PLAN_SCHEMA_VERSION, Plan, build_plan, plan_hash
from wcow_contract.wire.plan_check import (
    EntryRefusedError,
    checked_entry,
    first_difference,
    not_rendered,
)


class PlanError(ValueError):
    pass


def load_plan(text: str, source: str = "plan") -> Plan:
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanError(f"{source}: not JSON: {error}") from None
    except RecursionError:  # json raises it for deep nesting; no plan nests more than ~8
        raise PlanError(f"{source}: refused: JSON nested too deeply") from None
    if not isinstance(plan, dict) or plan.get("kind") != PLAN_KIND:
        raise PlanError(f"{source}: not a {PLAN_KIND} document")
    if plan.get("schemaVersion") != PLAN_SCHEMA_VERSION:
        raise PlanError(
            f"{source}: plan schemaVersion {shown(plan.get('schemaVersion'))} is not "
            f"{PLAN_SCHEMA_VERSION}: upgrade wcow-agent to match the operator"
        )
    body = {key: value for key, value in plan.items() if key != "hash"}
    if plan.get("hash") != plan_hash(body):
        raise PlanError(f"{source}: the plan's hash does not match its content (edited by hand?)")
    handlers = plan.get("handlers")
    if not isinstance(handlers, dict):
        raise PlanError(f"{source}: handlers: must be an object of handler -> entry")
    checked = {}
    for handler, entry in handlers.items():
        try:
            checked[handler] = checked_entry(handler, entry)
        except EntryRefusedError as refused:
            raise PlanError(f"{source}: handlers.{refused.field}: {refused.why}") from None
    # Every entry is the renderer's; the document around them must be too (runtimesPath is
    # never read, the agent has its own, but a plan that differs is not the operator's).
    typed = build_plan(checked)
    expected = {key: value for key, value in typed.view().items() if key != "hash"}
    found = first_difference(body, expected)
    if found is not None:
        path, got, wanted = found
        raise PlanError(f"{source}: {path}: {not_rendered(got, wanted)}")
    return typed
