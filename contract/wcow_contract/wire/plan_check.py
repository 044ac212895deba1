"""Whether a plan entry is exactly what the renderer makes of the profile spec it carries.

The plan's hash proves it was not damaged, not who wrote it. Both sides check entries the same
way: the agent before any of an entry reaches config.toml, and the operator before it writes a
profile's last good entry again (a profile that turned invalid keeps the entry the plan
holds, which a forger may have written). There is no list of allowed keys to drift from the
renderer: an entry is parsed back into a profile with the model, rendered again and compared
key by key and type by type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.text import printable, shown
from wcow_contract.validation import is_dns1123_label
from wcow_contract.wire.plan import PlanEntry, entry_document, plan_entry

MESSAGE_MAX = 400
# Where a field of the profile document is in a plan entry (``entry_document``).
_METADATA_FIELDS = {
    "metadata.name": "profile",
    "metadata.generation": "generation",
    "metadata.uid": "uid",
}
ABSENT: Final = object()  # a missing key, in first_difference's answers


class EntryRefusedError(ValueError):
    """A plan entry that is not what the operator renders from the spec it carries."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def checked_entry(handler: Any, entry: Any) -> PlanEntry:
    """The typed entry, when ``entry`` is exactly what the operator renders from the spec it
    carries; else ``EntryRefusedError`` naming the first thing wrong (field, why)."""
    shape = _shape_problem(handler, entry)
    if shape is not None:
        raise EntryRefusedError(*shape)
    try:
        profile = parse_profile(entry_document(entry))
    except ProfileInvalidError as error:
        first = error.problems[0]
        field = _METADATA_FIELDS.get(first.field, first.field)
        raise EntryRefusedError(f"{handler}.{field}", _bounded(str(first))) from None
    if profile.handler != handler:
        raise EntryRefusedError(
            f"{handler}.spec.handler",
            f"names handler {shown(profile.handler)}, but the entry is for {handler!r}",
        )
    rendered = plan_entry(profile)
    found = first_difference(entry, rendered.view())
    if found is not None:
        path, got, expected = found
        raise EntryRefusedError(f"{handler}.{path}", not_rendered(got, expected))
    return rendered


def entry_problem(handler: Any, entry: Any) -> tuple[str, str] | None:
    """(field, why) for the first thing wrong with one plan entry; None when it is exactly
    what the operator renders from the spec it carries."""
    try:
        checked_entry(handler, entry)
    except EntryRefusedError as refused:
        return refused.field, refused.why
    return None


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


def not_rendered(got: Any, expected: Any = ABSENT) -> str:
    if got is ABSENT:
        why = f"missing (wcow-runtime renders {shown(expected)} here)"
    elif expected is ABSENT:
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
    ``expected`` (JSON-equal with the same types: ``true`` is not ``1``); ``ABSENT`` stands
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
            return _path(path, key), got[key], ABSENT
        found = first_difference(got[key], expected[key], _path(path, key))
        if found is not None:
            return found
    for key in sorted(expected, key=str):
        if key not in got:
            return _path(path, key), ABSENT, expected[key]
    return None


def _path(path: str, key: Any) -> str:
    name = key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else shown(key)
    return f"{path}.{name}" if path else name
