"""Every annotation hcsshim reads from a pod, and what the admission webhook lets a pod set.

containerd copies the pod annotations its handler's ``pod_annotations`` patterns match into
the sandbox spec AND every container spec (``GetPassthroughAnnotations``: containerd v1.7.35
``pkg/cri/server/sandbox_run_windows.go`` and ``container_create_windows.go``; v2.2.9
``internal/cri/server/podsandbox/sandbox_run_windows.go`` and ``container_create.go``), and
the runhcs shim reads them. A pod's annotation wins over the handler's own
``DefaultContainerAnnotations``, ``VmProcessorCount`` and ``VmMemorySizeInMb``, which
``oci.UpdateSpecFromOptions`` adds only where the pod set nothing (hcsshim
``internal/oci/uvm.go``). So whatever the allow-list lets through, a tenant sets.

Sources: hcsshim ``pkg/annotations/annotations.go`` and ``internal/annotations/annotations.go``
at v0.11.7 (containerd 1.7's shim), v0.12.9 (2.0), v0.14.1, v0.15.0-rc.4 and HEAD 7c9ff7f4
(2026-08-20); what the WCOW path reads: ``internal/oci/uvm.go`` (SpecToUVMCreateOpts,
specToUVMCreateOptionsCommon), ``internal/oci/annotations.go`` (ProcessAnnotations,
parseAdditionalRegistryValues, parseHVSocketServiceTable), ``internal/hcsoci`` (devices,
process dumps), ``internal/jobcontainers/oci.go`` and ``cmd/containerd-shim-runhcs-v1/pod.go``
(HostProcess). v0.9.12 (containerd 1.6) kept them in ``internal/oci/annotations.go``.

Each key is one of:

- ``Bounded``: a pod may set it within what the profile gives (the webhook checks the value);
- ``Harmless``: it only restricts the pod's own VM or containers (or changes nothing outside
  them), so any well-formed value is admitted;
- ``OptIn``: refused unless the profile lists the exact key in ``spec.annotations.pod`` (a
  wildcard such as ``io.microsoft.virtualmachine.*`` does not count): host paths, host pipes,
  host CPU groups and NUMA nodes, registry values in the guest, Hyper-V socket rules, LCOW
  and confidential-VM settings that a WCOW pod has no business setting.

Any other key under ``io.microsoft.`` or ``microsoft.com/`` (a later hcsshim may read it) is
treated as ``OptIn``. Keys outside those prefixes are not read by hcsshim.

A key of more than 63 characters without a '/' (``...memory.allowovercommit``, the MMIO and
NUMA keys, ``hv-socket.service-table.<GUID>``) can never be a pod annotation: the API server
refuses it (apimachinery v0.35.4 ``pkg/api/validation/objectmeta.go`` ValidateAnnotations:
IsQualifiedName, names of at most 63 characters), and the profile model refuses it as a
pattern. They are judged all the same, for requests posted to the webhook directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Treatment = Literal["Bounded", "Harmless", "OptIn"]
ValueKind = Literal["count", "bool", "text"]

# The prefixes hcsshim reads annotations under; nothing else reaches it.
HCS_PREFIXES: Final = ("io.microsoft.", "microsoft.com/")

VM: Final = "io.microsoft.virtualmachine."
ANNOTATION_PROCESSOR_COUNT: Final = f"{VM}computetopology.processor.count"
ANNOTATION_MEMORY_MB: Final = f"{VM}computetopology.memory.sizeinmb"
ANNOTATION_PROCESSOR_LIMIT: Final = f"{VM}computetopology.processor.limit"
ANNOTATION_PROCESSOR_WEIGHT: Final = f"{VM}computetopology.processor.weight"
ANNOTATION_PHYSICALLY_BACKED: Final = f"{VM}fullyphysicallybacked"
ANNOTATION_TZ_NOINHERIT: Final = f"{VM}wcow.timezone.noinherit"
PROCESSOR_COUNT: Final = ANNOTATION_PROCESSOR_COUNT
MEMORY_SIZE_MB: Final = ANNOTATION_MEMORY_MB
PROCESSOR_LIMIT: Final = ANNOTATION_PROCESSOR_LIMIT
PROCESSOR_WEIGHT: Final = ANNOTATION_PROCESSOR_WEIGHT
PHYSICALLY_BACKED: Final = ANNOTATION_PHYSICALLY_BACKED
ALLOW_OVERCOMMIT: Final = f"{VM}computetopology.memory.allowovercommit"
HOST_PROCESS_PREFIX: Final = "microsoft.com/hostprocess-"
HOST_PROCESS: Final = f"{HOST_PROCESS_PREFIX}container"
HV_SOCKET_PREFIX: Final = f"{VM}hv-socket.service-table."

# hcsshim's range for the processor limit (100000 = 100 %) and weight.
PROCESSOR_LIMIT_MAX: Final = 100000
PROCESSOR_WEIGHT_MAX: Final = 10000
# The weight a utility VM gets when nothing sets one: containerd gives every Windows sandbox
# spec CPU shares of 2 (WithWindowsDefaultSandboxShares, DefaultSandboxCPUshares = 2,
# containerd v1.7.35 pkg/cri/opts/spec_windows_opts.go), and hcsshim's ParseAnnotationsCPUWeight
# takes the shares when the annotation is unset.
SANDBOX_DEFAULT_WEIGHT: Final = 2
# The size a utility VM gets when neither the processor count and memory annotations nor the
# runhcs options VmProcessorCount and VmMemorySizeInMb set one (hcsshim internal/uvm/create.go
# newDefaultOptions).
UVM_DEFAULT_PROCESSORS: Final = 2
UVM_DEFAULT_MEMORY_MB: Final = 1024


@dataclass(frozen=True)
class HcsAnnotation:
    key: str
    treatment: Treatment  # what a pod may set
    kind: ValueKind
    why: str
    # Why a profile may not set it for every pod through the runhcs option
    # DefaultContainerAnnotations (None: it may). hcsshim adds those defaults to every
    # sandbox and container spec that lacks the key (internal/oci/uvm.go
    # UpdateSpecFromOptions), so they act whatever the admission webhook allowed, and they
    # travel in the plan to every node.
    as_default: str | None = None


def _a(
    key: str, treatment: Treatment, kind: ValueKind, why: str, *, as_default: str | None = None
) -> HcsAnnotation:
    return HcsAnnotation(key, treatment, kind, why, as_default)


_BOUNDS_BYPASS = (
    "(the admission webhook bounds pods by spec.vm; a default here would size every VM past "
    "those bounds)"
)


CATALOGUE: Final[tuple[HcsAnnotation, ...]] = (
    # -- sizing and scheduling weight of the utility VM: bounded by the profile
    _a(PROCESSOR_COUNT, "Bounded", "count",
       "at most spec.vm.maxProcessorCount (Fixed without it: processorCount)",
       as_default=f"set spec.vm.processorCount {_BOUNDS_BYPASS}"),
    _a(MEMORY_SIZE_MB, "Bounded", "count",
       "at most spec.vm.maxMemoryMB (Fixed without it: memoryMB), rounded up to even MB",
       as_default=f"set spec.vm.memoryMB {_BOUNDS_BYPASS}"),
    _a(PROCESSOR_LIMIT, "Bounded", "count",
       "1-100000; at most spec.vm.processorLimit when the profile sets one",
       as_default="set spec.vm.processorLimit"),
    _a(PROCESSOR_WEIGHT, "Bounded", "count",
       "1-10000; at most spec.vm.processorWeight, else the sandbox default of 2: a higher "
       "weight takes processor time from other tenants' VMs",
       as_default="set spec.vm.processorWeight"),
    _a(PHYSICALLY_BACKED, "Bounded", "bool",
       "true commits all VM memory at start: memory requests are raised to limits "
       "(FromPodLimits); on a Fixed profile only where the profile backs memory itself",
       as_default="set spec.vm.fullyPhysicallyBacked (which also charges the node for the "
       "whole VM through the RuntimeClass overhead)"),
    _a(ALLOW_OVERCOMMIT, "Bounded", "bool",
       "false commits all VM memory at start: treated as physically backed",
       as_default="false backs every VM with physical memory that the RuntimeClass "
       "overhead does not charge; set spec.vm.fullyPhysicallyBacked"),
    # -- restrict only the pod's own VM or containers
    _a(f"{VM}computetopology.memory.enabledeferredcommit", "Harmless", "bool",
       "commits the VM's memory later, not more of it"),
    _a(f"{VM}storageqos.iopsmaximum", "Harmless", "count", "caps the VM's own storage IOPS"),
    _a(f"{VM}storageqos.bandwidthmaximum", "Harmless", "count",
       "caps the VM's own storage bandwidth"),
    _a(ANNOTATION_TZ_NOINHERIT, "Harmless", "bool", "the guest runs in UTC",
       as_default="set spec.vm.inheritHostTimezone"),
    _a(f"{VM}fileshares.disablewritable", "Harmless", "bool", "read-only file shares"),
    _a(f"{VM}wcow.virtualSMB.nodirectmap", "Harmless", "bool", "no direct map for VSMB shares"),
    _a(f"{VM}disablecompartmentnamespace", "Harmless", "bool",
       "network compartment namespacing inside the guest"),
    _a("io.microsoft.disable-unsafe-operations", "Harmless", "bool",
       "expands to gmsa.disable, fileshares.disablewritable, nodirectmap and "
       "disable-hostprocess-container: restrictions only"),
    _a("io.microsoft.container.wcow.gmsa.disable", "Harmless", "bool", "refuses gMSA"),
    _a("microsoft.com/disable-hostprocess-container", "Harmless", "bool",
       "refuses HostProcess containers"),
    _a("io.microsoft.container.processdumplocation", "Harmless", "text",
       "a path inside the container"),
    _a("io.microsoft.wcow.processdumptype", "Harmless", "text", "mini or full, in the container"),
    _a("io.microsoft.wcow.processdumpcount", "Harmless", "count", "dumps kept in the container"),
    # -- HostProcess: containerd sets hostprocess-container itself AFTER copying pod
    # annotations (v1.7.35 and v2.2.9), so the pod's value is overwritten; a pod asking for
    # it by annotation is still refused (HostProcess comes from securityContext, which Pod
    # Security checks). inherit-user makes a HostProcess container run as containerd's own
    # account (SYSTEM), whatever runAsUserName says.
    _a(HOST_PROCESS, "Bounded", "bool", "only false: HostProcess is set by securityContext"),
    _a("microsoft.com/hostprocess-inherit-user", "OptIn", "text",
       "runs a HostProcess container as containerd's account (SYSTEM)"),
    _a("microsoft.com/hostprocess-rootfs-location", "OptIn", "text",
       "a host path for a HostProcess container's root file system"),
    # -- host resources, host paths and guest configuration: only where the profile opts in
    _a(f"{VM}cpugroup.id", "OptIn", "text", "puts the VM in a host CPU group"),
    _a(f"{VM}resource-partition-id", "OptIn", "text", "puts the VM in a host resource partition"),
    _a(f"{VM}computetopology.memory.lowmmiogapinmb", "OptIn", "count", "MMIO layout"),
    _a(f"{VM}computetopology.memory.highmmiobaseinmb", "OptIn", "count", "MMIO layout"),
    _a(f"{VM}computetopology.memory.highmmiogapinmb", "OptIn", "count", "MMIO layout"),
    _a(f"{VM}computetopology.processor.numa.max-processors-per-node", "OptIn", "count",
       "virtual NUMA (needs physically backed memory)"),
    _a(f"{VM}computetopology.processor.numa.max-size-per-node", "OptIn", "count",
       "virtual NUMA"),
    _a(f"{VM}computetopology.numa.preferred-physical-nodes", "OptIn", "text",
       "pins the VM to host NUMA nodes"),
    _a(f"{VM}computetopology.numa.mapped-physical-nodes", "OptIn", "text",
       "pins the VM to host NUMA nodes"),
    _a(f"{VM}computetopology.numa.count-of-processors", "OptIn", "text", "virtual NUMA"),
    _a(f"{VM}computetopology.numa.count-of-memory-blocks", "OptIn", "text", "virtual NUMA"),
    _a(f"{VM}dump-directory-path", "OptIn", "text", "a host directory for VM dumps",
       as_default="a host folder where utility VM crash dumps (the pods' memory) are written"),
    _a(f"{VM}kerneldrivers", "OptIn", "text", "installs drivers from host paths in the VM",
       as_default="host paths of drivers loaded into every utility VM"),
    _a(f"{VM}bootfilesrootpath", "OptIn", "text", "boots the VM from a host directory",
       as_default="a host folder the utility VM boots from (LCOW and confidential WCOW only)"),
    _a(f"{VM}console.pipe", "OptIn", "text", "a named pipe on the host for the VM console"),
    _a(f"{VM}wcow.additional-reg-keys", "OptIn", "text", "registry values in the guest"),
    _a(f"{VM}forwardlogs.enable", "OptIn", "bool", "forwards guest logs to the host"),
    _a(f"{VM}forwardlogs.sources", "OptIn", "text", "forwards guest logs to the host"),
    _a(f"{VM}forwardlogs.defaultsources.enable", "OptIn", "bool",
       "forwards guest logs to the host"),
    _a(f"{VM}wcow.securitypolicy", "OptIn", "text", "confidential WCOW"),
    _a(f"{VM}wcow.enforcer", "OptIn", "text", "confidential WCOW"),
    _a(f"{VM}wcow.isolation_type", "OptIn", "text",
       "confidential WCOW; commits all VM memory"),
    _a(f"{VM}wcow.gueststatefile", "OptIn", "text", "a host file"),
    _a(f"{VM}wcow.uvm-reference-info-file", "OptIn", "text", "a host file"),
    _a(f"{VM}uvm-hash-envelope-reference-info-file", "OptIn", "text", "a host file"),
    _a(f"{VM}wcow.no_secure_boot", "OptIn", "bool", "turns Secure Boot off"),
    _a(f"{VM}wcow.writable_efi", "OptIn", "bool", "a writable EFI disk"),
    _a(f"{VM}wcow.amd-certificate", "OptIn", "text", "confidential WCOW"),
    _a(f"{VM}no_security_hardware", "OptIn", "bool", "confidential WCOW"),
    _a("io.microsoft.wcow.debug", "OptIn", "bool", "keeps the VM's disks on the host"),
    _a("io.microsoft.wcow.debug_data_path", "OptIn", "text", "a host path"),
    _a("io.microsoft.container.wcow.deviceextensions", "OptIn", "text",
       "host files read into the container's HCS document",
       as_default="host files that hand host devices to the containers"),
    _a("io.microsoft.network.ncproxy", "OptIn", "text",
       "the shim dials this network-config proxy address",
       as_default="set the NCProxyAddr option (checked to be a pipe on this host)"),
    _a("io.microsoft.network.ncproxy.containerid", "OptIn", "text", "ncproxy identity"),
    _a("io.microsoft.container.memory.sizeinmb", "OptIn", "count",
       "overrides every container's memory limit (process isolation: beyond Kubernetes')"),
    _a("io.microsoft.container.processor.count", "OptIn", "count",
       "overrides every container's CPU limit"),
    _a("io.microsoft.container.processor.limit", "OptIn", "count",
       "overrides every container's CPU limit"),
    _a("io.microsoft.container.processor.weight", "OptIn", "count",
       "overrides every container's CPU weight"),
    _a("io.microsoft.container.storage.qos.iopsmaximum", "Harmless", "count",
       "caps the containers' own IOPS"),
    _a("io.microsoft.container.storage.qos.bandwidthmaximum", "Harmless", "count",
       "caps the containers' own bandwidth"),
)  # fmt: skip

BY_KEY: Final = {entry.key: entry for entry in CATALOGUE}


def is_hcs_key(key: str) -> bool:
    """Whether hcsshim may read ``key`` (it reads only these prefixes)."""
    return key.startswith(HCS_PREFIXES)


def entry_for(key: str) -> HcsAnnotation:
    """The catalogue's entry, or OptIn for a key it does not know (LCOW-only keys,
    ``hv-socket.service-table.<GUID>``, and whatever a later hcsshim adds)."""
    found = BY_KEY.get(key)
    if found is not None:
        return found
    why = (
        "Hyper-V socket rules for the VM (hcsshim: can break the guest's own services)"
        if key.startswith(HV_SOCKET_PREFIX)
        else "not a WCOW setting this operator knows the effect of"
    )
    return HcsAnnotation(key, "OptIn", "text", why)


_HOST_PROCESS_DEFAULT = (
    "the HostProcess family (microsoft.com/hostprocess-inherit-user runs a HostProcess pod "
    "with the shim's own SYSTEM token instead of the user it asked for; "
    "...-rootfs-location mounts the image at a host path; ...-container is rewritten by "
    "containerd for every pod, so a default for it does nothing)"
)


# hcsshim looks annotations up by their exact key (Go map reads), so another casing is
# not read at all: keys are compared exactly, here and in the CRD's twin.
_DEFAULT_REFUSALS: Final = {entry.key: entry.as_default for entry in CATALOGUE if entry.as_default}


def refused_default_keys() -> list[str]:
    """The catalogue's keys a profile may not default for every pod, besides the HostProcess
    family, which is refused by prefix."""
    return sorted(_DEFAULT_REFUSALS)


def default_refusal(key: str) -> str | None:
    """Why a profile may not set ``key`` in DefaultContainerAnnotations; None: it may."""
    if key.startswith(HOST_PROCESS_PREFIX):
        return _HOST_PROCESS_DEFAULT
    return _DEFAULT_REFUSALS.get(key)
