"""Kubernetes name and label grammars, as apimachinery validates them (quantities:
``wcow_contract.quantity``)."""

from __future__ import annotations

import re

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

_dns_label = re.compile(DNS1123_LABEL_PATTERN)
_dns_subdomain = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_label_name = re.compile(rf"^{_LABEL_NAME}$")
_label_value = re.compile(LABEL_VALUE_PATTERN)


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
