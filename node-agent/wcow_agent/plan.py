"""Read the plan the operator (or ``wcow render``) wrote, refusing what this agent cannot use."""

from __future__ import annotations

import json
from typing import Any

from wcow_operator.render.plan import PLAN_KIND, PLAN_SCHEMA_VERSION, plan_hash


class PlanError(ValueError):
    pass


def load_plan(text: str, source: str = "plan") -> dict[str, Any]:
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanError(f"{source}: not JSON: {error}") from None
    if not isinstance(plan, dict) or plan.get("kind") != PLAN_KIND:
        raise PlanError(f"{source}: not a {PLAN_KIND} document")
    if plan.get("schemaVersion") != PLAN_SCHEMA_VERSION:
        raise PlanError(
            f"{source}: plan schemaVersion {plan.get('schemaVersion')!r} is not "
            f"{PLAN_SCHEMA_VERSION}: upgrade wcow-agent to match the operator"
        )
    body = {key: value for key, value in plan.items() if key != "hash"}
    if plan.get("hash") != plan_hash(body):
        raise PlanError(f"{source}: the plan's hash does not match its content (edited by hand?)")
    return plan
