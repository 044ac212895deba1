"""The Node labels an agent sets and the operator reads (and RuntimeClasses select on)."""

from __future__ import annotations

from wcow_contract.v1alpha1 import READY_LABEL_PREFIX
from wcow_contract.windows_builds import WindowsBuild

READY_VALUE = "ready"


def ready_label(handler: str) -> str:
    """The node label an agent sets once ``handler`` passed its canary on that node."""
    return f"{READY_LABEL_PREFIX}{handler}"


GUEST_BUILD_LABEL_PREFIX = "node.runtime.wcow.dev/guest-build-"
GUEST_BUILD_VALUE = "true"


def guest_build_label(build: WindowsBuild) -> str:
    """The node label an agent sets for each guest build its pause image can boot
    (``node.runtime.wcow.dev/guest-build-17763: "true"``): node pools per guest build select
    on it."""
    return f"{GUEST_BUILD_LABEL_PREFIX}{build.number}"
