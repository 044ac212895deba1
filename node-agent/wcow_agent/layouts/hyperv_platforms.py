"""Where Hyper-V isolated pods can run, per distribution (docs/hyperv-platforms.md).

Two managed offerings say they do not run them, whatever the VM could do: on their nodes
``--hyperv auto`` answers "unavailable" without asking Windows, and the handlers' reason
``HyperVUnavailable`` names the platform and its source. ``--hyperv yes`` still overrides.
Elsewhere Windows is asked (hypervisor present and the vmcompute service); where a
distribution limits it to some machines, the reason says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from wcow_agent.config.layout import Distribution


@dataclass(frozen=True)
class HyperVStance:
    forbidden: bool
    """The platform does not run Hyper-V isolated containers: don't ask the host."""
    message: str
    """The ``HyperVUnavailable`` message on this platform."""


AKS_SOURCES: Final = (
    "Azure/AKS#1792 (Hyper-V isolation, open since 2020) and Azure/AKS#4447, where the AKS "
    "team wrote on 2024-12-11 that it has no plans to add Hyper-V support"
)
GKE_SOURCE: Final = (
    '"Microsoft Hyper-V containers are not supported" '
    "(docs.cloud.google.com/kubernetes-engine/docs/concepts/windows-server-gke)"
)
EKS_SOURCE: Final = (
    "only EC2 instance types with nested virtualization (8th generation Intel: C8i, M8i, R8i "
    "and their flex variants, launched with the CPU option NestedVirtualization=enabled) "
    "and bare metal instances run a hypervisor under Windows (EC2 CpuOptions "
    "NestedVirtualization, docs.aws.amazon.com/AWSEC2/latest/APIReference)"
)

STANCES: Final[dict[Distribution, HyperVStance]] = {
    "aks": HyperVStance(
        True, f"AKS does not support Hyper-V isolated Windows containers: {AKS_SOURCES}"
    ),
    "gke": HyperVStance(True, f"GKE does not support Hyper-V isolated containers: {GKE_SOURCE}"),
    "eks": HyperVStance(
        False,
        "Hyper-V is not available on this host: on EKS, " + EKS_SOURCE,
    ),
}


def hyperv_stance(distribution: Distribution) -> HyperVStance | None:
    """What the platform says of Hyper-V; None: the host decides, the generic message."""
    return STANCES.get(distribution)
