"""Read the plan the operator (or ``wcow render``) wrote, refusing what this agent cannot use.

The hash proves the plan was not damaged, not that whoever computed it validated it (a plan
is a file anyone can write for ``merge``). So every entry is checked again with the
operator's own model and validators, and a bad one is refused naming its field, before any
of it reaches config.toml.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from wcow_operator.api.runhcs_options import RUNHCS_OPTIONS
from wcow_operator.api.v1alpha1 import CanarySpec, ContainerdSpec, VMSpec
from wcow_operator.api.validation import is_dns1123_label
from wcow_operator.api.windows_builds import parse_windows_build
from wcow_operator.render.containerd import SANDBOX_ISOLATION
from wcow_operator.render.plan import PLAN_KIND, PLAN_SCHEMA_VERSION, plan_hash


class PlanError(ValueError):
    pass


def load_plan(text: str, source: str = "plan") -> dict[str, Any]:
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
            f"{source}: plan schemaVersion {plan.get('schemaVersion')!r} is not "
            f"{PLAN_SCHEMA_VERSION}: upgrade wcow-agent to match the operator"
        )
    body = {key: value for key, value in plan.items() if key != "hash"}
    if plan.get("hash") != plan_hash(body):
        raise PlanError(f"{source}: the plan's hash does not match its content (edited by hand?)")
    handlers = plan.get("handlers")
    if not isinstance(handlers, dict):
        raise PlanError(f"{source}: handlers: must be an object of handler -> entry")
    for handler, entry in handlers.items():
        problem = entry_problem(handler, entry)
        if problem is not None:
            field, message = problem
            raise PlanError(f"{source}: handlers.{field}: {message}")
    return plan


def entry_problem(handler: str, entry: Any) -> tuple[str, str] | None:
    """(field, why) for the first thing wrong with one plan entry; None when nothing is.
    The checks are the profile model's (``wcow_operator.api``)."""
    if not is_dns1123_label(handler):
        return (
            repr(handler),
            "not a containerd handler name: a DNS-1123 label (lowercase letters, digits and "
            "'-', at most 63 characters), as spec.handler must be",
        )
    if not isinstance(entry, dict):
        return handler, f"must be an object, not {type(entry).__name__}"
    for check in (_isolation_problem, _build_problem, _parts_problem, _runtime_problem):
        found = check(entry)
        if found:
            return f"{handler}.{found[0]}", found[1]
    return None


def _isolation_problem(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    isolation = entry.get("isolation")
    if isolation in SANDBOX_ISOLATION:
        return None
    return "isolation", f"must be one of {', '.join(SANDBOX_ISOLATION)} (got {isolation!r})"


def _build_problem(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    build = entry.get("windowsBuild")
    if build is None:
        return None
    if not isinstance(build, str):
        return "windowsBuild", f"must be a string (got {build!r})"
    try:
        parse_windows_build(build)
    except ValueError as error:
        return "windowsBuild", str(error)
    return None


def _parts_problem(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    for name, model in (("vm", VMSpec), ("canary", CanarySpec)):
        if entry.get(name) is not None:
            found = _model_problem(model, entry[name])
            if found:
                return f"{name}.{found[0]}", found[1]
    return None


def _model_problem(model: type[BaseModel], data: Any) -> tuple[str, str] | None:
    try:
        model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(value)"
        return where, f"{first['msg']} (got {first.get('input')!r})"
    return None


def _runtime_problem(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    runtime = entry.get("runtime")
    if not isinstance(runtime, dict):
        return "runtime", f"must be the runtimes.<handler> table (got {runtime!r})"
    found = _table_problem(runtime)
    return (f"runtime.{found[0]}", found[1]) if found else None


def _table_problem(runtime: Mapping[str, Any]) -> tuple[str, str] | None:
    names = {"runtimeType": "runtime_type", "runtimePath": "runtime_path"}
    found = _model_problem(
        ContainerdSpec, {key: runtime[name] for key, name in names.items() if name in runtime}
    )
    if found:  # ContainerdSpec names them in camelCase, the table in snake_case
        return names.get(found[0], found[0]), found[1]
    for key in ("pod_annotations", "container_annotations"):
        patterns = runtime.get(key, [])
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            return key, f"must be a list of strings (got {patterns!r})"
    options = runtime.get("options", {})
    if not isinstance(options, dict):
        return "options", f"must be a table (got {options!r})"
    for key, value in options.items():
        problem = _option_problem(key, value)
        if problem:
            return f"options.{key}", f"{problem} (got {value!r})"
    return None


_KIND_RULES: dict[type, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "must be true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "must be an integer"),
    str: (lambda v: isinstance(v, str), "must be a string"),
    dict: (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
        ),
        "must be a map of strings to strings",
    ),
}


def _option_problem(key: str, value: Any) -> str | None:
    """The type rules of ``RUNHCS_OPTIONS`` (the same table the profile's options are
    checked against); which options a profile may set is the operator's business."""
    spec = RUNHCS_OPTIONS.get(key)
    if spec is None:
        return "not a runhcs option (containerd would drop it silently)"
    accepts, rule = _KIND_RULES[spec.kind]
    if not accepts(value):
        return rule
    if spec.kind is int and not spec.minimum <= value <= spec.maximum:
        return f"must be between {spec.minimum} and {spec.maximum}"
    return None
