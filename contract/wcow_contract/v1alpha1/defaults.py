"""What a profile gets for a field it leaves out, where the value is the API's own choice
(the field descriptions say the same)."""

from __future__ import annotations

from typing import Final

DEFAULT_RUNTIME_TYPE: Final = "io.containerd.runhcs.v1"
DEFAULT_PLATFORM: Final = "windows/amd64"

# What a utility VM costs the node beyond the pod's own requests when its memory is
# virtually backed: the figure sig-windows' windows-testing uses for its Hyper-V class.
BASELINE_OVERHEAD = {"cpu": "100m", "memory": "512Mi"}

# Annotation allow-lists as in containerd's Windows defaults (config_windows.go, 1.7+).
VM_ANNOTATIONS = "io.microsoft.virtualmachine.*"
CONTAINER_ANNOTATIONS = "io.microsoft.container.*"

DRAIN_TIMEOUT_DEFAULT: Final = 600
