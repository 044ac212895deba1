"""Canonical JSON: same data in, same bytes out, whatever the strings hold.

The plan's hash is taken over ``canonical_json``; both sides must serialize alike, so this is
the one place that says how.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def dump_json(document: Any) -> str:
    """Canonical JSON: sorted keys, fixed separators, UTF-8 kept as is, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def canonical_json(document: Any) -> bytes:
    """The compact form that content hashes are taken over."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def canonical_object(members: Mapping[str, bytes]) -> bytes:
    """``canonical_json`` of an object whose members' values are canonical JSON already: the
    same bytes, built without encoding those values again (a plan's handlers, 273 KB at 500,
    are encoded once for its hash and its text)."""
    return (
        b"{"
        + b",".join(canonical_json(key) + b":" + members[key] for key in sorted(members))
        + b"}"
    )
