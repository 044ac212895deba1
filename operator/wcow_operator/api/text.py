"""Text a tenant wrote, as it may appear in a refusal, a condition, a metric label or a log.

An annotation value may be 256 KiB (the API server's limit for all of a pod's annotations)
and may hold newlines and terminal escape sequences. Whatever reaches a person or a log line
is cut to a few dozen characters, says how much was left out, and has every control
character escaped, so one pod cannot flood the logs or forge lines in them.
"""

from __future__ import annotations

from typing import Final

SHOWN_CHARACTERS: Final = 64


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """``value`` for a message: a quoted, escaped string of at most ``limit`` characters of
    it (plus how many more there were); numbers and booleans as written; anything else by
    its JSON type, never walked."""
    if isinstance(value, str):
        head = repr(value[:limit])  # repr escapes newlines, escapes and other control chars
        more = len(value) - limit
        return f"{head} (and {more} more characters)" if more > 0 else head
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10**100 else None
        return repr(value) if digits is not None else "a number of more than 100 digits"
    kinds = {dict: "an object", list: "a list"}
    return next((name for kind, name in kinds.items() if isinstance(value, kind)), "a value")
