"""A containerd runtime handler for the runhcs shim, as data: the ``runtimes.<handler>``
table a profile stands for, and where such tables live in each config.toml schema.

The table is the same for every config schema version; only the path of the ``runtimes`` map
differs (``RUNTIMES_PATH``). The operator renders it into the plan and into TOML fragments;
the agent merges it into config.toml and renders it again to check a plan entry.
"""

from __future__ import annotations

from typing import Any

from wcow_contract.catalog.hcs_annotations import UVM_DEFAULT_MEMORY_MB, UVM_DEFAULT_PROCESSORS
from wcow_contract.catalog.runhcs_options import DEBUG_TYPE_ETW, DEBUG_TYPE_NPIPE
from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile

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
