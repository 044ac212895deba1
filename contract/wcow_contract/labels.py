"""The Node labels an agent sets and the operator reads (and RuntimeClasses select on)."""

from __future__ import annotations

from wcow_contract.v1alpha1 import READY_LABEL_PREFIX

READY_VALUE = "ready"


def ready_label(handler: str) -> str:
    """The node label an agent sets once ``handler`` passed its canary on that node."""
    return f"{READY_LABEL_PREFIX}{handler}"
