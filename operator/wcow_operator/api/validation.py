"""Kubernetes name and label grammars, as apimachinery validates them (quantities:
``wcow_operator.api.quantity``)."""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_PATTERN = rf"^({_LABEL_NAME})?$"
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
