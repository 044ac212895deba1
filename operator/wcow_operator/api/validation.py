"""Kubernetes name, label and quantity grammars, as apimachinery validates them."""

from __future__ import annotations

import math
import re
from fractions import Fraction

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_PATTERN = rf"^({_LABEL_NAME})?$"
# A label key ([prefix/]name, apimachinery IsQualifiedName) as one expression for the CRD:
# a DNS-subdomain prefix and a name of at most 63 characters. The prefix's own bound (253) is
# QUALIFIED_NAME_LONG_PREFIX, which a key must not match.
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUALIFIED_NAME_LONG_PREFIX = rf"^[^/]{{{DNS1123_SUBDOMAIN_MAX + 1},}}/"
# A non-negative Kubernetes quantity (resource.Quantity), as PodOverhead needs.
QUANTITY_PATTERN = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)

_dns_label = re.compile(DNS1123_LABEL_PATTERN)
_dns_subdomain = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_label_name = re.compile(rf"^{_LABEL_NAME}$")
_label_value = re.compile(LABEL_VALUE_PATTERN)
_quantity = re.compile(QUANTITY_PATTERN)


def is_dns1123_label(value: str) -> bool:
    return len(value) <= DNS1123_LABEL_MAX and _dns_label.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= DNS1123_SUBDOMAIN_MAX and _dns_subdomain.fullmatch(value) is not None


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):
        return f"prefix {prefix!r} must be a lowercase DNS subdomain"
    if not name or len(name) > DNS1123_LABEL_MAX or _label_name.fullmatch(name) is None:
        return (
            f"name {name!r} must be 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > DNS1123_LABEL_MAX or _label_value.fullmatch(value) is None:
        return (
            "a label value must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


# apimachinery ValidateAnnotations: keys are qualified names once lowercased, and keys and
# values together are at most 256 KiB (bytes of UTF-8).
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _go_lower(text: str) -> str:
    # Go's strings.ToLower maps each rune by its simple case mapping; Python's lower() uses the
    # full mapping, which differs for one letter only (U+0130 lowercases to 'i' plus a dot).
    return text.replace("\u0130", "i").lower()


def metadata_annotations_problem(annotations: dict[str, str]) -> str | None:
    """Why the API server would refuse these metadata.annotations, or None."""
    for key in annotations:
        problem = qualified_name_problem(_go_lower(key))
        if problem:
            return f"key {key!r:.80} is not a valid annotation key: {problem}"
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        return f"{size} bytes of keys and values is more than the {ANNOTATIONS_MAX_BYTES} allowed"
    return None


def is_quantity(value: str) -> bool:
    return _quantity.fullmatch(value) is not None


_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_QUANTITY_PARTS = re.compile(r"^\+?([0-9]*\.?[0-9]*)(.*)$")


def canonical_quantity(text: str) -> str:
    """The form the API server stores a quantity in (apimachinery Quantity.String()):
    2048Mi -> 2Gi, 1000m -> 1, 0.5 -> 500m, 1.5Gi -> 1536Mi. Rendering this form keeps
    GitOps diffs and the controller's compare-before-write quiet."""
    if not is_quantity(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    match = _QUANTITY_PARTS.match(text)
    assert match is not None
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        value, binary, exponent_form = number * 1024 ** _BINARY[suffix], True, False
    elif suffix[:1] in ("e", "E"):
        value, binary, exponent_form = number * Fraction(10) ** int(suffix[1:]), False, True
    else:
        value, binary, exponent_form = number * Fraction(10) ** _DECIMAL[suffix], False, False
    if value == 0:
        return "0"
    nanos = math.ceil(value * 10**9)  # Quantity keeps at most nano precision, rounding up
    if binary and value >= 1024 and value.denominator == 1:
        count, power = int(value), 0
        while count % 1024 == 0 and power < 6:
            count, power = count // 1024, power + 1
        return f"{count}{['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'][power]}"
    mantissa, exponent = nanos, -9
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa, exponent = mantissa // 1000, exponent + 3
    if exponent_form:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"
