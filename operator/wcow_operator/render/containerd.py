"""containerd runtime handlers for the runhcs shim, as data and as TOML.

The table of one handler is plain data (``runtime_table``); it is the same for every config
schema version, only the path of the ``runtimes`` map differs (``RUNTIMES_PATH``). TOML is
produced by a serializer (tomli-w) from that data and parsed back with tomllib before it is
returned, so no profile value can change the document's structure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

import tomli_w

from wcow_operator.api.runhcs_options import DEBUG_TYPE_ETW, DEBUG_TYPE_NPIPE
from wcow_operator.api.v1alpha1 import UVM_DEFAULT_MEMORY_MB, UVM_DEFAULT_PROCESSORS
from wcow_operator.api.v1alpha1 import WindowsRuntimeProfile as Profile

# Where runtime handlers live, by config.toml schema version (root key ``version``).
# 2: containerd 1.6/1.7. 3: containerd 2.0-2.2. 4: containerd 2.3+, which moves only the
# server sections (grpc, ttrpc, debug, metrics) into plugins; CRI runtime paths are as in 3.
RUNTIMES_PATH: dict[int, tuple[str, ...]] = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"),
    3: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"),
    4: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"),
}
CONFIG_VERSIONS = tuple(RUNTIMES_PATH)

SANDBOX_ISOLATION = {"Process": 0, "HyperV": 1}  # runhcs SandboxIsolation enum
DEBUG_TYPES = {"Npipe": DEBUG_TYPE_NPIPE, "Etw": DEBUG_TYPE_ETW}


class RenderError(RuntimeError):
    """Rendered output did not parse back to its data: a bug, never a user error."""


def runhcs_options(profile: Profile) -> dict[str, Any]:
    """The ``options`` table: runhcs.Options by Go field name, enums as integers."""
    spec = profile.spec
    options: dict[str, Any] = {
        "SandboxIsolation": SANDBOX_ISOLATION[spec.isolation],
        "SandboxPlatform": spec.sandbox.platform,
    }
    vm = spec.effective_vm()
    default_annotations: dict[str, str] = {}
    if vm is not None:
        options["VmProcessorCount"] = vm.processor_count or UVM_DEFAULT_PROCESSORS
        options["VmMemorySizeInMb"] = vm.memory_mb or UVM_DEFAULT_MEMORY_MB
        options["ScaleCpuLimitsToSandbox"] = vm.scale_cpu_limits_to_sandbox
        default_annotations.update(vm.container_annotations())
    shim = spec.containerd
    if shim.debug:
        options["Debug"] = True
    if shim.debug_type is not None:
        options["DebugType"] = DEBUG_TYPES[shim.debug_type]
    if shim.log_level is not None:
        options["LogLevel"] = shim.log_level
    if shim.io_retry_timeout_seconds is not None:
        options["IoRetryTimeoutInSec"] = shim.io_retry_timeout_seconds
    extra = dict(shim.options or {})
    default_annotations.update(extra.pop("DefaultContainerAnnotations", {}))
    options.update(extra)
    if default_annotations:
        options["DefaultContainerAnnotations"] = default_annotations
    return options


def runtime_table(profile: Profile) -> dict[str, Any]:
    """The ``runtimes.<handler>`` table for one profile, as plain data."""
    spec = profile.spec
    table: dict[str, Any] = {"runtime_type": spec.containerd.runtime_type}
    if spec.containerd.runtime_path is not None:
        table["runtime_path"] = spec.containerd.runtime_path
    pod = spec.pod_annotation_patterns()
    if pod:
        table["pod_annotations"] = pod
    container = spec.container_annotation_patterns()
    if container:
        table["container_annotations"] = container
    table["options"] = runhcs_options(profile)
    return table


def _sorted(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _sorted(v) if isinstance(v, Mapping) else v for k, v in sorted(data.items())}


def runtimes_document(tables: Mapping[str, Mapping[str, Any]], version: int) -> dict[str, Any]:
    """The data of a config fragment holding these handler tables."""
    document: dict[str, Any] = {"version": version}
    node = document
    for name in RUNTIMES_PATH[version]:
        node = node.setdefault(name, {})
    for handler in sorted(tables):
        node[handler] = dict(tables[handler])
    return document


HEADER = (
    "Rendered by wcow-runtime from WindowsRuntimeProfiles. Do not edit: change the profiles.",
    "A fragment of containerd's config.toml holding only the runtime handlers. The node agent",
    "merges it into config.toml; on containerd 1.x do not use it as an `imports` drop-in (a",
    "plugin table there replaces the CRI plugin's other settings).",
)


def render_containerd_toml(tables: Mapping[str, Mapping[str, Any]], version: int) -> str:
    """TOML text of a config fragment with these handler tables, checked by parsing it back."""
    if version not in RUNTIMES_PATH:
        raise ValueError(
            f"containerd config version {version} is not supported: use one of "
            f"{', '.join(map(str, CONFIG_VERSIONS))}"
        )
    expected = runtimes_document(tables, version)
    # tomli-w writes values only through its escaping serializer; it is ~30x faster than
    # tomlkit for whole documents (tomlkit is for round-tripping a user's file).
    text = "".join(f"# {line}\n" for line in HEADER) + tomli_w.dumps(_sorted(expected))
    if tomllib.loads(text) != expected:
        raise RenderError(f"containerd TOML (version {version}) does not parse back to its data")
    return text
