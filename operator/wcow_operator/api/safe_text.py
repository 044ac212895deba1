"""Text that came from somewhere untrusted (a node, a plan), made safe to show.

A node's report and a forged plan are attacker text. Echoed as they are, a newline or an
escape sequence can make one node's message look like a line about another node in
``kubectl`` output, a condition message or a log, and a huge value can flood all of them.
``printable`` turns every character that is not printable (controls, format characters such
as bidi overrides, line and paragraph separators) into a visible escape and bounds the
length. It is idempotent (its output is printable text that it leaves alone), so a status
read back and written again does not change.
"""

from __future__ import annotations

from typing import Any

ELLIPSIS = "..."
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


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


def shown(value: Any, limit: int = 120) -> str:
    """A value as it may appear in an error message: its repr (quoted and escaped), bounded."""
    return printable(repr(value), limit)
