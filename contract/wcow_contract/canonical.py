"""Canonical JSON: same data in, same bytes out, whatever the strings hold.

The plan's hash is taken over ``canonical_json``; both sides must serialize alike, so this is
the one place that says how.
"""

from __future__ import annotations

import json
from typing import Any


def dump_json(document: Any) -> str:
    """Canonical JSON: sorted keys, fixed separators, UTF-8 kept as is, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def canonical_json(document: Any) -> bytes:
    """The compact form that content hashes are taken over."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )
