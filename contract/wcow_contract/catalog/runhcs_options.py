"""The runhcs shim options (``containerd.runhcs.v1.Options``) a profile may set by name.

containerd decodes ``[...runtimes.<h>.options]`` into hcsshim's Options struct with go-toml
and drops any key it does not recognise without a word (snake_case proto names included).
Casing is where the lines differ: containerd 1.x (go-toml v1) matches the Go field name, its
all-lowercase form and its lower-first form; 2.x (go-toml v2) matches any casing. So every
key must be the exact Go field name: a misspelt one would do nothing, and a miscased one
would do something on some containerd lines and nothing on others (and would escape the
checks that look options up by name).

Sources: hcsshim ``cmd/containerd-shim-runhcs-v1/options/runhcs.proto`` at 7c9ff7f4
(2026-08-20), and v0.9.12 to v0.15.0-rc.4 for the shims containerd's lines ship (what a shim
reads of an option: its ``cmd/containerd-shim-runhcs-v1`` and ``internal/oci/uvm.go``); the
decoders, run on rendered handlers: containerd v1.7.29
``pkg/cri/server/helpers.go`` generateRuntimeOptions (go-toml v1) and v2.1.5
``internal/cri/config/config.go`` GenerateRuntimeOptions (go-toml/v2).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wcow_contract.catalog.hcs_annotations import default_refusal
from wcow_contract.text import KEY_CHARACTERS, shown

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class OptionSpec:
    """How one runhcs option is typed, and whether a profile may set it in ``options``."""

    kind: type  # bool, int, str or dict (map<string,string>)
    # Why the option may not be set through spec.containerd.options (None: allowed).
    refusal: str | None = None
    minimum: int = 0
    maximum: int = INT32_MAX
    # What is wrong with a value of the right type (None: nothing), for options whose value
    # the shim hands to Windows as an address or a path.
    check: Callable[[Any], str | None] | None = None


# logrus level names (hcsshim parses LogLevel with logrus.ParseLevel; a bad name stops the shim).
LOG_LEVELS = ("trace", "debug", "info", "warning", "warn", "error", "fatal", "panic")

# DebugType enum: NPIPE=0, FILE=1 (makes the shim panic: "not supported"), ETW=2.
DEBUG_TYPE_NPIPE = 0
DEBUG_TYPE_ETW = 2

# NCProxyAddr: hcsshim dials it with go-winio's DialPipe (internal/uvm/network.go,
# GetNCProxyClient, v0.9 to v0.15), i.e. a named pipe path; ncproxy listens on
# \\.\pipe\ncproxy-ttrpc by default (cmd/ncproxy/config.go). Only a pipe on this host: a
# \\server\pipe\name path would be dialled over SMB, so every pod's network setup would be
# asked of another machine.
NCPROXY_PIPE_PATTERN = r"^\\\\\.\\pipe\\[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_NCPROXY_PIPE = re.compile(NCPROXY_PIPE_PATTERN)


def ncproxy_problem(value: str) -> str | None:
    if _NCPROXY_PIPE.fullmatch(value):
        return None
    return (
        f"{shown(value)} is not a named pipe on this host: write \\\\.\\pipe\\NAME "
        "(letters, digits, '.', '_', '-'), e.g. \\\\.\\pipe\\ncproxy-ttrpc; hcsshim dials "
        "it as a pipe, and a \\\\server\\pipe path would reach another machine"
    )


# At most this many DefaultContainerAnnotations: the CRD's twin rule walks every key, and the
# API server refuses a rule whose estimated cost an unbounded map makes too high.
MAX_DEFAULT_ANNOTATIONS = 32


def default_annotations_problem(annotations: dict[str, str]) -> str | None:
    """Keys that move the security boundary or a bound the project enforces are refused,
    each with the field to use instead (the catalogue in ``hcs_annotations``)."""
    if len(annotations) > MAX_DEFAULT_ANNOTATIONS:
        return f"has {len(annotations)} annotations: at most {MAX_DEFAULT_ANNOTATIONS}"
    for key in sorted(annotations):
        why = default_refusal(key)
        if why is None:
            continue
        return f"may not set {shown(key, KEY_CHARACTERS)}, which it would add to every pod: {why}"
    return None


RUNHCS_OPTIONS: dict[str, OptionSpec] = {
    "Debug": OptionSpec(bool, refusal="set spec.containerd.debug instead"),
    "DebugType": OptionSpec(int, refusal="set spec.containerd.debugType instead"),
    "RegistryRoot": OptionSpec(str, refusal="hcsshim does not read RegistryRoot"),
    "SandboxImage": OptionSpec(
        str,
        refusal="no hcsshim reads SandboxImage and no containerd uses it; the pause image is "
        "node-wide: sandbox_image in containerd 1.x's CRI plugin, pinned_images.sandbox in "
        "containerd 2.x's io.containerd.cri.v1.images plugin",
    ),
    "SandboxPlatform": OptionSpec(str, refusal="set spec.sandbox.platform instead"),
    "SandboxIsolation": OptionSpec(int, refusal="set spec.isolation instead"),
    "BootFilesRootPath": OptionSpec(
        str,
        refusal="no released hcsshim reads it for Windows containers (up to v0.15.0-rc.4 only "
        "LCOW utility VMs boot from it; later shims only confidential WCOW VMs, which "
        "wcow-runtime does not configure): it would name a host folder of boot files that "
        "nothing uses",
    ),
    "VmProcessorCount": OptionSpec(int, refusal="set spec.vm.processorCount instead"),
    "VmMemorySizeInMb": OptionSpec(int, refusal="set spec.vm.memoryMB instead"),
    "GPUVHDPath": OptionSpec(
        str, refusal="hcsshim stopped reading GPUVHDPath after v0.11; it would be ignored"
    ),
    "ScaleCpuLimitsToSandbox": OptionSpec(
        bool, refusal="set spec.vm.scaleCpuLimitsToSandbox instead"
    ),
    "DefaultContainerScratchSizeInGb": OptionSpec(
        int,
        refusal="no hcsshim release reads DefaultContainerScratchSizeInGb; size the scratch "
        "through the pod's ephemeral-storage limit (CRI rootfs_size_in_bytes) instead",
    ),
    "DefaultVmScratchSizeInGb": OptionSpec(
        int, refusal="no hcsshim release reads DefaultVmScratchSizeInGb; it would be ignored"
    ),
    "ShareScratch": OptionSpec(
        bool, refusal="no hcsshim release reads ShareScratch (LCOW only); it would be ignored"
    ),
    "NCProxyAddr": OptionSpec(str, check=ncproxy_problem),
    "LogLevel": OptionSpec(str, refusal="set spec.containerd.logLevel instead"),
    "IoRetryTimeoutInSec": OptionSpec(
        int, refusal="set spec.containerd.ioRetryTimeoutSeconds instead"
    ),
    "DefaultContainerAnnotations": OptionSpec(dict, check=default_annotations_problem),
    "NoInheritHostTimezone": OptionSpec(
        bool,
        refusal="hcsshim never reads NoInheritHostTimezone; set spec.vm.inheritHostTimezone: "
        "false instead (it uses the io.microsoft.virtualmachine.wcow.timezone.noinherit "
        "annotation, which hcsshim honours)",
    ),
    # hcsshim up to v0.15.0-rc.1: a plain bool, scrubbing only when true. From v0.15.0-rc.2
    # an optional bool: unset means scrubbing on, only an explicit false turns it off, and
    # only a containerd whose own hcsshim has the optional field (2.4+) can send a false
    # (proto3 drops a plain false). So the renderer writes ScrubLogs only when a profile sets it.
    "ScrubLogs": OptionSpec(bool),
}

# What containerd's TOML decoders accept besides the exact Go name (the decoders named
# above, run on 1.6.39, 1.7.29, 2.0.11, 2.1.5, 2.2.7 and 2.3.4): go-toml v1 (containerd 1.x)
# matches the exact name, all-lowercase or lower-first only; go-toml/v2 (containerd 2.x)
# matches any casing.
_CONTAINERD_1X_ALIASES = {
    variant: name
    for name in RUNHCS_OPTIONS
    for variant in (name.lower(), name[0].lower() + name[1:])
}
_ANY_CASING = {name.lower(): name for name in RUNHCS_OPTIONS}


def suggest_option(key: str) -> str | None:
    """The Go field name a misspelt option key most likely meant, if any."""
    lowered = {name.lower(): name for name in RUNHCS_OPTIONS}
    folded = key.replace("_", "").replace("-", "").lower()
    if folded in lowered:
        return lowered[folded]
    close = difflib.get_close_matches(folded, list(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


def check_option(key: str, value: Any) -> Any:
    """Validate one ``options`` entry; return the value to render.

    Raises ValueError naming the key, the value and what to write instead.
    """
    spec = RUNHCS_OPTIONS.get(key)
    if spec is None:
        raise ValueError(_unknown(key))
    if spec.refusal is not None:
        raise ValueError(f"option {key!r} may not be set here: {spec.refusal}")
    return _check_type(key, spec, value)


def _unknown(key: str) -> str:
    canonical = _ANY_CASING.get(key.lower())
    if canonical is not None:
        if key in _CONTAINERD_1X_ALIASES:
            decoded = "containerd 1.x and 2.x decode it"
        else:
            decoded = "containerd 2.x decodes it but 1.x drops it"
        refusal = RUNHCS_OPTIONS[canonical].refusal
        fix = (
            f"and {canonical!r} itself may not be set here: {refusal}"
            if refusal
            else f"write the Go field name {canonical!r}"
        )
        return (
            f"runhcs option {key!r} is {canonical!r} in another casing: {decoded} into "
            f"{canonical}, so what it does would depend on the node's containerd line and "
            f"wcow-runtime's checks would not see it; {fix}"
        )
    hint = suggest_option(key)
    did_you_mean = f"; did you mean {hint!r}?" if hint else ""
    return (
        f"unknown runhcs option {key!r}: containerd would silently ignore it{did_you_mean} "
        f"(known options: {', '.join(sorted(RUNHCS_OPTIONS))})"
    )


def _check_type(key: str, spec: OptionSpec, value: Any) -> Any:
    if spec.kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"option {key!r} must be true or false, not {value!r}")
        return value
    if spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"option {key!r} must be an integer, not {value!r}")
        if not spec.minimum <= value <= spec.maximum:
            raise ValueError(
                f"option {key!r} must be between {spec.minimum} and {spec.maximum}, not {value}"
            )
        return value
    if spec.kind is str:
        if not isinstance(value, str):
            raise ValueError(f"option {key!r} must be a string, not {shown(value)}")
        return _checked(key, spec, value)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"option {key!r} must be a map of strings to strings, not {shown(value)}")
    return _checked(key, spec, dict(value))


def _checked(key: str, spec: OptionSpec, value: Any) -> Any:
    problem = spec.check(value) if spec.check is not None else None
    if problem is not None:
        raise ValueError(f"option {key!r}: {problem}")
    return value
