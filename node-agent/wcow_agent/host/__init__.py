"""Everything Windows-specific, behind small interfaces (see ``interfaces.py``)."""

from wcow_agent.host.interfaces import (
    CancelledError,
    CommandTimeoutError,
    Containerd,
    ContainerdError,
    Cri,
    CriError,
    CriStatus,
    FileSecurity,
    Hcs,
    HcsError,
    Host,
    HostError,
    NodeInventory,
    SandboxStatus,
    WindowsInfo,
)

__all__ = [
    "CancelledError",
    "CommandTimeoutError",
    "Containerd",
    "ContainerdError",
    "Cri",
    "CriError",
    "CriStatus",
    "FileSecurity",
    "Hcs",
    "HcsError",
    "Host",
    "HostError",
    "NodeInventory",
    "SandboxStatus",
    "WindowsInfo",
]
