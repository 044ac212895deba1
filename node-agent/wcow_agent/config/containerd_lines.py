"""What each containerd line honours of a runtime handler table: the one version matrix.

containerd decodes a handler's ``options`` into the runhcs ``Options`` of the hcsshim it
vendors and drops, without a word, every key that struct lacks. ``containerd config dump``
echoes the raw table, so it cannot show the loss: only this matrix can. A handler whose table
needs more than the node's line honours is not eligible there (``ContainerdTooOld``), rather
than written and labelled ready while the shim never sees part of it.

Sources: the runhcs ``Options`` of hcsshim's ``cmd/containerd-shim-runhcs-v1/options/runhcs.proto``
at the release each containerd vendors, and the runtime keys of containerd's
``pkg/cri/config/config.go`` (1.6.39, 1.7.34) and ``internal/cri/config/config.go`` (2.x);
rendered handlers were decoded with containerd's own option code (``go test -mod=vendor`` in
containerd 1.6.39, 1.7.29, 2.0.11 and 2.1.5; 2.2.7, 2.3.4 and 2.4.0-beta.0 with their vendored
go-toml/v2; ``tools/containerd-decode`` keeps doing so for 1.7 and 2.2):
- containerd 1.6 (1.6.20 / 1.6.39) vendors hcsshim v0.9.8 / v0.9.12: Options fields 1-17
  only, no ``DefaultContainerAnnotations``, ``NoInheritHostTimezone``, ``ScrubLogs``;
- containerd 1.7 vendors hcsshim v0.10 / v0.11 (1.7.34: v0.11.7): all 20 fields;
- containerd 2.0 to 2.3 vendor v0.12.9 to v0.15.0-rc.1, 2.4 beta v0.15.0-rc.3 (``ScrubLogs``
  an optional bool there, still honoured): all 20 fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wcow_contract.catalog.hcs_annotations import (
    ANNOTATION_PHYSICALLY_BACKED,
    ANNOTATION_PROCESSOR_LIMIT,
    ANNOTATION_PROCESSOR_WEIGHT,
    ANNOTATION_TZ_NOINHERIT,
)

# runhcs Options fields 1-17 (hcsshim v0.9: cmd/containerd-shim-runhcs-v1/options/runhcs.proto).
_OPTIONS_V0_9 = frozenset(
    {
        "Debug",
        "DebugType",
        "RegistryRoot",
        "SandboxImage",
        "SandboxPlatform",
        "SandboxIsolation",
        "BootFilesRootPath",
        "VmProcessorCount",
        "VmMemorySizeInMb",
        "GPUVHDPath",
        "ScaleCpuLimitsToSandbox",
        "DefaultContainerScratchSizeInGb",
        "DefaultVmScratchSizeInGb",
        "ShareScratch",
        "NCProxyAddr",
        "LogLevel",
        "IoRetryTimeoutInSec",
    }
)
# Fields 18-20, from hcsshim v0.10 on.
_OPTIONS_V0_10 = _OPTIONS_V0_9 | {
    "DefaultContainerAnnotations",
    "NoInheritHostTimezone",
    "ScrubLogs",
}

# Keys of a runtimes.<handler> table the CRI plugin reads (pkg/cri/config/config.go in 1.x,
# internal/cri/config/config.go in 2.x).
_RUNTIME_KEYS_1_6 = frozenset(
    {
        "runtime_type",
        "runtime_path",
        "runtime_engine",
        "runtime_root",
        "pod_annotations",
        "container_annotations",
        "options",
        "privileged_without_host_devices",
        "base_runtime_spec",
        "cni_conf_dir",
        "cni_max_conf_num",
    }
)
_RUNTIME_KEYS_1_7 = _RUNTIME_KEYS_1_6 | {
    "privileged_without_host_devices_all_devices_allowed",
    "snapshotter",
    "sandbox_mode",
}
_RUNTIME_KEYS_2 = (_RUNTIME_KEYS_1_7 - {"runtime_engine", "runtime_root", "sandbox_mode"}) | {
    "sandboxer",
    "io_type",
    "cgroup_writable",
}


@dataclass(frozen=True)
class ContainerdLine:
    """One containerd release line and what it honours of a handler table."""

    name: str
    first: tuple[int, int]
    """The first (major, minor) of the line."""
    hcsshim: str
    """The hcsshim its releases vendor (whose Options struct decodes ``options``)."""
    options: frozenset[str]
    runtime_keys: frozenset[str]


LINES: tuple[ContainerdLine, ...] = (
    ContainerdLine("1.6", (1, 6), "v0.9.x (1.6.39: v0.9.12)", _OPTIONS_V0_9, _RUNTIME_KEYS_1_6),
    ContainerdLine(
        "1.7", (1, 7), "v0.10/v0.11 (1.7.34: v0.11.7)", _OPTIONS_V0_10, _RUNTIME_KEYS_1_7
    ),
    ContainerdLine("2.x", (2, 0), "v0.12.9 to v0.15.0-rc.3", _OPTIONS_V0_10, _RUNTIME_KEYS_2),
)

# Where a key of DefaultContainerAnnotations comes from in a profile, for messages.
ANNOTATION_FIELDS: Mapping[str, str] = {
    ANNOTATION_PROCESSOR_LIMIT: "spec.vm.processorLimit",
    ANNOTATION_PROCESSOR_WEIGHT: "spec.vm.processorWeight",
    ANNOTATION_PHYSICALLY_BACKED: "spec.vm.fullyPhysicallyBacked",
    ANNOTATION_TZ_NOINHERIT: "spec.vm.inheritHostTimezone: false",
}


def line_for(version: str) -> ContainerdLine:
    """The line of a containerd version (``1.7.20``, ``2.0.0``). Older than the oldest known
    line counts as it (the agent needs 1.6 for HostProcess anyway); newer as the newest."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"not a containerd version: {version!r}") from None
    found = LINES[0]
    for line in LINES:
        if (major, minor) >= line.first:
            found = line
    return found


def release_line(version: str) -> str:
    """The release line of a containerd version as the Node label
    ``node.runtime.wcow.dev/containerd-line`` shows it: ``major.minor`` (``1.7.20`` -> ``1.7``,
    ``2.1.0-rc.1`` -> ``2.1``). Finer than ``line_for``: 2.0 and 2.1 differ in what else they
    do (config schema, transfer service) even where a handler table reads the same."""
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isdigit() and len(p) <= 4 for p in parts[:2]):
        raise ValueError(f"not a containerd version: {version!r}")
    return f"{int(parts[0])}.{int(parts[1])}"


def version_tuple(version: str) -> tuple[int, int]:
    major, minor, *_ = (int(part) for part in version.split("."))
    return major, minor


def config_version_for(containerd_version: str) -> int:
    """The config.toml schema a containerd writes by default: 1.x -> 2, 2.0-2.2 -> 3, 2.3+ -> 4."""
    major, minor = version_tuple(containerd_version)
    if major < 2:
        return 2
    return 3 if (major, minor) < (2, 3) else 4


def _describe_option(key: str, value: Any) -> str:
    if key == "DefaultContainerAnnotations" and isinstance(value, Mapping) and value:
        sources = sorted({ANNOTATION_FIELDS.get(k, f"annotation {k}") for k in value})
        return f"runhcs option DefaultContainerAnnotations (from {', '.join(sources)})"
    return f"runhcs option {key}"


def unsupported(table: Mapping[str, Any], version: str) -> list[str]:
    """What of this runtimes.<handler> table containerd ``version`` would silently drop,
    one phrase each (empty: it honours all of it)."""
    line = line_for(version)
    missing = [f"runtime key {key}" for key in sorted(table) if key not in line.runtime_keys]
    options = table.get("options")
    if isinstance(options, Mapping):
        missing += [
            _describe_option(key, options[key])
            for key in sorted(options)
            if key not in line.options
        ]
    return missing


def first_line_honouring(table: Mapping[str, Any]) -> ContainerdLine | None:
    """The oldest line that honours all of ``table``; None when none does."""
    for line in LINES:
        if not unsupported(table, f"{line.first[0]}.{line.first[1]}.0"):
            return line
    return None
