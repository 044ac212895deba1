"""Text from someone untrusted (a tenant's pod, a node's report, a forged plan), as it may
appear in a refusal, a condition, a status field, a metric label or a log.

An annotation value may be 256 KiB and a node's message anything its agent writes; either
may hold newlines, terminal escape sequences or bidi overrides. Echoed as they are, they can
flood logs or make one node's message look like a line about another node. So whatever
reaches a person or a log line is bounded, says how much was left out, and has every
non-printable character escaped.

- ``shown(value)``: a value quoted for an error message (strings cut to 64 characters;
  objects and lists named by their type, never walked).
- ``printable(text, limit)``: free text kept as text (a status message), escaped and bounded;
  idempotent, so a status read back and written again does not change.
"""

from __future__ import annotations

from typing import Final

ELLIPSIS: Final = "..."
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

SHOWN_CHARACTERS: Final = 64
# An annotation key is at most 253 + 1 + 63 characters: shown whole where a key is named.
KEY_CHARACTERS: Final = 317


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


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, limit: int) -> str:
    """``text`` with every non-printable character escaped, at most ``limit`` characters."""
    if not text.isprintable():
        text = "".join(char if char.isprintable() else _escape(char) for char in text)
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS
