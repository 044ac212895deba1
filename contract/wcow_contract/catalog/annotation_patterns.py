"""Annotation allow-list patterns that can match an annotation Kubernetes will carry.

containerd passes a pod (or container) annotation to the shim when a ``pod_annotations``
(``container_annotations``) pattern matches its key with Go's ``path.Match`` and drops the
error of a malformed pattern, so a broken glob silently matches nothing. Kubernetes keys
are ``[prefix/]name`` (apimachinery ``IsQualifiedName``, applied to the lowercased key for
annotations): at most one ``/``, a DNS-subdomain prefix of at most 253 characters and a
name of 1-63 letters, digits, ``-``, ``_`` or ``.`` that starts and ends with a letter or
digit. A pattern that no such key can match is a promise nobody keeps, so it is refused.

The check is exact for the character grammar (the glob is run against a small automaton of
the key grammar) and conservative for lengths (only a pattern whose fixed characters alone
are too long is refused).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

PREFIX_MAX = 253
NAME_MAX = 63

# Characters that differ in how the key grammar treats them; one representative each is
# enough to decide whether a glob token can take part in a valid key.
_CLASSES = {
    "lower": string.ascii_lowercase + string.digits,
    "upper": string.ascii_uppercase,
    "dash": "-",
    "dot": ".",
    "underscore": "_",
    "slash": "/",
}
_KEY_ALPHABET = "".join(_CLASSES.values())
_CLASS_OF = {char: name for name, chars in _CLASSES.items() for char in chars}

# The key grammar as a small NFA over those classes. Annotation keys are validated
# lowercased, so upper-case letters count as lower-case ones.
_ALNUM = frozenset({"lower", "upper"})


def _to(state: str, *classes: str) -> dict[str, str]:
    return dict.fromkeys(classes, state)


_NFA: dict[str, dict[str, str]] = {
    # prefix: DNS labels joined by '.', each starting and ending with a letter or digit
    "p_start": _to("p_alnum", *_ALNUM),
    "p_alnum": {
        **_to("p_alnum", *_ALNUM),
        **_to("p_dash", "dash"),
        **_to("p_dot", "dot"),
        **_to("n_start", "slash"),
    },
    "p_dash": {**_to("p_alnum", *_ALNUM), **_to("p_dash", "dash")},
    "p_dot": _to("p_alnum", *_ALNUM),
    # name: a letter or digit, then letters, digits, '-', '_', '.', ending in a letter or digit
    "n_start": _to("n_alnum", *_ALNUM),
    "n_alnum": {**_to("n_alnum", *_ALNUM), **_to("n_mid", "dash", "dot", "underscore")},
    "n_mid": {**_to("n_alnum", *_ALNUM), **_to("n_mid", "dash", "dot", "underscore")},
}
_ACCEPT = "n_alnum"


class BadPatternError(ValueError):
    """The pattern is malformed for Go's path.Match (which returns ErrBadPattern)."""


@dataclass(frozen=True)
class _Token:
    classes: frozenset[str]  # key-character classes one character of this token can be
    star: bool = False  # '*': any run (possibly empty) of non-'/' characters
    slash: bool = False  # a literal '/'


def _class_set(matches: str) -> frozenset[str]:
    return frozenset(_CLASS_OF[c] for c in matches)


def _escaped(pattern: str, index: int) -> tuple[str, int]:
    """Go's getEsc: one (possibly backslash-escaped) class character and the index after."""
    if index >= len(pattern) or pattern[index] in "-]":
        raise BadPatternError("a character class is empty, unterminated or has a bad range")
    if pattern[index] == "\\":
        index += 1
        if index >= len(pattern):
            raise BadPatternError("a '\\' at the end escapes nothing")
    char = pattern[index]
    if index + 1 >= len(pattern):
        raise BadPatternError("a character class is not closed with ']'")
    return char, index + 1


def _class(pattern: str, index: int) -> tuple[_Token, int]:
    """A ``[...]`` class starting after its '[': the token and the index after its ']'."""
    negated = index < len(pattern) and pattern[index] == "^"
    index += negated
    ranges: list[tuple[str, str]] = []
    while True:
        if index < len(pattern) and pattern[index] == "]" and ranges:
            index += 1
            break
        low, index = _escaped(pattern, index)
        high = low
        if pattern[index] == "-":
            high, index = _escaped(pattern, index + 1)
        ranges.append((low, high))
    matched = "".join(
        c for c in _KEY_ALPHABET if any(lo <= c <= hi for lo, hi in ranges) != negated
    )
    return _Token(_class_set(matched)), index


def tokens(pattern: str) -> list[_Token]:
    """The glob as tokens, by Go's path.Match syntax; BadPatternError when malformed."""
    found: list[_Token] = []
    index = 0
    not_slash = _class_set(_KEY_ALPHABET.replace("/", ""))
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*":
            if not (found and found[-1].star):
                found.append(_Token(not_slash, star=True))
            continue
        if char == "?":
            found.append(_Token(not_slash))
            continue
        if char == "[":
            token, index = _class(pattern, index)
            found.append(token)
            continue
        if char == "\\":
            if index >= len(pattern):
                raise BadPatternError("a '\\' at the end escapes nothing")
            char = pattern[index]
            index += 1
        literal = _class_set(char) if char in _CLASS_OF else frozenset()
        found.append(_Token(literal, slash=char == "/"))
    return found


def _can_match(glob: list[_Token], start: str, accept: str = _ACCEPT) -> bool:
    """Whether some string ``glob`` matches drives the key NFA from ``start`` to ``accept``."""
    seen: set[tuple[int, str]] = set()
    todo = [(0, start)]
    while todo:
        position, state = todo.pop()
        if (position, state) in seen:
            continue
        seen.add((position, state))
        if position == len(glob):
            if state == accept:
                return True
            continue
        token = glob[position]
        if token.star:
            todo.append((position + 1, state))  # the star matches nothing more
        for cls in token.classes:
            target = _NFA[state].get(cls)
            if target is not None:
                todo.append((position if token.star else position + 1, target))
    return False


# The same judgement as regular expressions the API server can run (a CEL rule of the CRD),
# exact for globs without a character class or an escape: no '[' and no '\\'. A star or a
# '?' can stand for a letter or digit, so a key can match such a glob exactly when, stars
# and '?' counted as letters, it has the key's shape: at most one '/', before it DNS labels
# joined by '.', after it (or alone) a name that starts and ends with a letter or digit. The
# lengths count the characters a star does not stand for, as _fixed does.
_GLOB_LABEL = r"[A-Za-z0-9*?]([-A-Za-z0-9*?]*[A-Za-z0-9*?])?"
_GLOB_NAME = r"[A-Za-z0-9*?]([-A-Za-z0-9_.*?]*[A-Za-z0-9*?])?"
PLAIN_GLOB_PATTERN = rf"^({_GLOB_LABEL}([.]{_GLOB_LABEL})*/)?{_GLOB_NAME}$"
PLAIN_GLOB_NAME_TOO_LONG = rf"(^|/)[*]*([^*/][*]*){{{NAME_MAX + 1},}}$"
PLAIN_GLOB_PREFIX_TOO_LONG = rf"^[*]*([^*/][*]*){{{PREFIX_MAX + 1},}}/"

_NAME_RULE = (
    "a name is 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)
_PREFIX_RULE = "a prefix is a DNS subdomain: labels of letters, digits and '-' joined by '.'"


def pattern_problem(pattern: str) -> str | None:
    """Why no annotation key Kubernetes accepts can match ``pattern``; None when one can."""
    try:
        glob = tokens(pattern)
    except BadPatternError as error:
        return f"not a valid glob (Go path.Match syntax, as containerd uses): {error}"
    slashes = [i for i, token in enumerate(glob) if token.slash]
    if len(slashes) > 1:
        return (
            "has more than one '/': annotation keys are [prefix/]name with at most one '/', "
            "so it can never match (containerd.io/snapshot/* labels are not pod annotations)"
        )
    why = _unmatchable_name(glob) if not slashes else _unmatchable_parts(glob, slashes[0])
    return f"can match no annotation key: {why}" if why else None


def _fixed(glob: list[_Token]) -> int:
    """How many characters the glob matches at least (each non-star token is one)."""
    return sum(not token.star for token in glob)


def _unmatchable_name(glob: list[_Token]) -> str | None:
    # No literal '/': the key is a bare name, unless a class supplies the '/'.
    if not any("slash" in token.classes for token in glob) and _fixed(glob) > NAME_MAX:
        return f"the name would be longer than {NAME_MAX}"
    if _can_match(glob, "p_start") or _can_match(glob, "n_start"):
        return None
    return f"without a '/' the whole key is a name, and {_NAME_RULE}"


def _unmatchable_parts(glob: list[_Token], slash: int) -> str | None:
    prefix, name = glob[:slash], glob[slash + 1 :]
    if _fixed(prefix) > PREFIX_MAX:
        return f"the prefix would be longer than {PREFIX_MAX}"
    if _fixed(name) > NAME_MAX:
        return f"the name would be longer than {NAME_MAX}"
    if not _can_match([*prefix, glob[slash]], "p_start", "n_start"):
        return f"{_PREFIX_RULE}, at most {PREFIX_MAX} characters"
    if not _can_match(name, "n_start"):
        return f"after the '/', {_NAME_RULE}"
    return None
