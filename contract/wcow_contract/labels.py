"""The Node labels an agent sets and the operator reads (and RuntimeClasses select on), and
the kubelet's own labels they sit beside."""

from __future__ import annotations

from wcow_contract.catalog.windows_builds import WindowsBuild

# The kubelet's well-known labels (k8s.io/api core/v1 well_known_labels.go LabelOSStable,
# LabelArchStable); node.kubernetes.io/windows-build is the build catalog's
# (``catalog.windows_builds.WINDOWS_BUILD_LABEL``).
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"

READY_LABEL_PREFIX = "runtime.wcow.dev/"
"""The API group's own prefix: ``runtime.wcow.dev/<handler>`` says the handler is ready on
the node, and a profile may not select on it (it says ``requireReadyLabel``)."""
READY_VALUE = "ready"


def ready_label(handler: str) -> str:
    """The node label an agent sets once ``handler`` passed its canary on that node."""
    return f"{READY_LABEL_PREFIX}{handler}"


NODE_LABEL_PREFIX = "node.runtime.wcow.dev/"
"""What an agent found on its node (capabilities), apart from the handlers' ready labels
(``runtime.wcow.dev/<handler>``): no handler name can make one of these."""

HYPERV_LABEL = f"{NODE_LABEL_PREFIX}hyperv"
"""``"true"`` when the host can run Hyper-V isolated containers, ``"false"`` otherwise."""
CONTAINERD_LINE_LABEL = f"{NODE_LABEL_PREFIX}containerd-line"
"""The node's containerd release line, ``major.minor`` (``1.7``, ``2.1``)."""

GUEST_BUILD_LABEL_PREFIX = f"{NODE_LABEL_PREFIX}guest-build-"
GUEST_BUILD_VALUE = "true"


def guest_build_label(build: WindowsBuild) -> str:
    """The node label an agent sets for each guest build its pause image can boot
    (``node.runtime.wcow.dev/guest-build-17763: "true"``): node pools per guest build select
    on it."""
    return f"{GUEST_BUILD_LABEL_PREFIX}{build.number}"


# Register a node pool's Windows nodes with this taint (NoSchedule) and its agent removes it
# once its first cycle has a verdict for every handler of the plan: until then no pod lands,
# and cluster-autoscaler, which treats the prefix startup-taint.cluster-autoscaler.kubernetes.io/
# as "still starting" (cluster-autoscaler FAQ.md, startup taints), scales up no second node.
STARTUP_TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/wcow-runtime"
