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
from collections.abc import Mapping
from typing import Any, Final

from wcow_operator.api.errors import ProfileInvalidError, parse_profile
from wcow_operator.api.text import printable, shown
from wcow_operator.api.validation import is_dns1123_label
from wcow_operator.render.plan import (
    PLAN_KIND,
    PLAN_SCHEMA_VERSION,
    build_plan,
    entry_document,
    plan_entry,
    plan_hash,
)

MESSAGE_MAX = 400
# Where a field of the profile document is in a plan entry (``entry_document``).
_METADATA_FIELDS = {
    "metadata.name": "profile",
    "metadata.generation": "generation",
    "metadata.uid": "uid",
}


class PlanError(ValueError):
    pass


_ABSENT: Final = object()


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
            f"{source}: plan schemaVersion {shown(plan.get('schemaVersion'))} is not "
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
    # Every entry is the renderer's; the document around them must be too (runtimesPath is
    # never read, the agent has its own, but a plan that differs is not the operator's).
    expected = {key: value for key, value in build_plan(handlers).items() if key != "hash"}
    found = first_difference(body, expected)
    if found is not None:
        path, got, wanted = found
        raise PlanError(f"{source}: {path}: {_not_rendered(got, wanted)}")
    return plan


def entry_problem(handler: Any, entry: Any) -> tuple[str, str] | None:
    """(field, why) for the first thing wrong with one plan entry; None when it is exactly
    what the operator renders from the spec it carries."""
    shape = _shape_problem(handler, entry)
    if shape is not None:
        return shape
    try:
        profile = parse_profile(entry_document(entry))
    except ProfileInvalidError as error:
        first = error.problems[0]
        field = _METADATA_FIELDS.get(first.field, first.field)
        return f"{handler}.{field}", _bounded(str(first))
    if profile.handler != handler:
        return (
            f"{handler}.spec.handler",
            f"names handler {shown(profile.handler)}, but the entry is for {handler!r}",
        )
    found = first_difference(entry, plan_entry(profile))
    if found is None:
        return None
    path, got, expected = found
    return f"{handler}.{path}", _not_rendered(got, expected)


def _shape_problem(handler: Any, entry: Any) -> tuple[str, str] | None:
    if not isinstance(handler, str) or not is_dns1123_label(handler):
        return (
            shown(handler),
            "not a containerd handler name: a DNS-1123 label (lowercase letters, digits and "
            "'-', at most 63 characters), as spec.handler must be",
        )
    if not isinstance(entry, dict):
        return handler, f"must be an object, not {type(entry).__name__}"
    if not isinstance(entry.get("spec"), dict):
        return (
            f"{handler}.spec",
            "missing: the entry does not carry the profile spec it was rendered from, so "
            "this agent cannot check it (a plan from wcow-operator older than this agent, or "
            "written by hand: upgrade the operator, or render the plan with `wcow render`)",
        )
    return None


def _not_rendered(got: Any, expected: Any = _ABSENT) -> str:
    if got is _ABSENT:
        why = f"missing (wcow-runtime renders {shown(expected)} here)"
    elif expected is _ABSENT:
        why = f"{shown(got)}: wcow-runtime never renders this field"
    else:
        why = (
            f"{shown(got)} is not what wcow-runtime renders from this entry's spec "
            f"({shown(expected)})"
        )
    return f"{why}; the plan was not written by wcow-operator (or by another version of it)"


def _bounded(message: str) -> str:
    return printable(message, MESSAGE_MAX)


def first_difference(got: Any, expected: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """(path, value found, value expected) of the first place where ``got`` is not exactly
    ``expected`` (JSON-equal with the same types: ``true`` is not ``1``); ``_ABSENT`` stands
    for a missing key. Keys that are there come first (what a writer added or changed), in
    sorted order, then keys that are missing. None when they are the same."""
    if isinstance(got, Mapping) and isinstance(expected, Mapping):
        return _mapping_difference(got, expected, path)
    if isinstance(got, list) and isinstance(expected, list):
        for index, (item, wanted) in enumerate(zip(got, expected, strict=False)):
            found = first_difference(item, wanted, f"{path}[{index}]")
            if found is not None:
                return found
        return (path, got, expected) if len(got) != len(expected) else None
    if type(got) is not type(expected) or got != expected:
        return path, got, expected
    return None


def _mapping_difference(
    got: Mapping[Any, Any], expected: Mapping[Any, Any], path: str
) -> tuple[str, Any, Any] | None:
    for key in sorted(got, key=str):
        if key not in expected:
            return _path(path, key), got[key], _ABSENT
        found = first_difference(got[key], expected[key], _path(path, key))
        if found is not None:
            return found
    for key in sorted(expected, key=str):
        if key not in got:
            return _path(path, key), _ABSENT, expected[key]
    return None


def _path(path: str, key: Any) -> str:
    name = key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else shown(key)
    return f"{path}.{name}" if path else name
