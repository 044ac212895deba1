"""The spec of a WindowsRuntimeProfile: the desired Windows runtime, its parts put together,
the rules that span them, and the values a profile runs with where it leaves fields out."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, StringConstraints, WithJsonSchema, field_validator, model_validator

from wcow_contract.catalog.hcs_annotations import UVM_DEFAULT_MEMORY_MB, UVM_DEFAULT_PROCESSORS
from wcow_contract.catalog.windows_builds import (
    WINDOWS_BUILD_LABEL,
    WINDOWS_BUILD_PATTERN,
    WindowsBuild,
    check_profile_build,
    parse_windows_build,
)
from wcow_contract.labels import ARCH_LABEL
from wcow_contract.quantity import canonical_quantity
from wcow_contract.v1alpha1.annotations import AnnotationsSpec
from wcow_contract.v1alpha1.canary import CanarySpec
from wcow_contract.v1alpha1.containerd import ContainerdSpec
from wcow_contract.v1alpha1.defaults import BASELINE_OVERHEAD, CONTAINER_ANNOTATIONS, VM_ANNOTATIONS
from wcow_contract.v1alpha1.fields import FieldError, Model
from wcow_contract.v1alpha1.images import ImagesSpec
from wcow_contract.v1alpha1.overhead import OverheadSpec
from wcow_contract.v1alpha1.rollout import RolloutSpec
from wcow_contract.v1alpha1.rules import SPEC_RULES
from wcow_contract.v1alpha1.sandbox import SandboxSpec
from wcow_contract.v1alpha1.scheduling import SchedulingSpec
from wcow_contract.v1alpha1.vm import SIZING_ANNOTATIONS, VMSpec
from wcow_contract.validation import DNS1123_LABEL_MAX, DNS1123_LABEL_PATTERN

Isolation = Literal["Process", "HyperV"]


class WindowsRuntimeProfileSpec(Model):
    """The desired Windows runtime: one containerd handler and its RuntimeClass."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": SPEC_RULES})

    isolation: Isolation
    """Process (shares the host kernel; image build must suit the host) or HyperV (a
    utility VM per pod)."""
    windows_build: (
        Annotated[
            str,
            StringConstraints(max_length=16),
            WithJsonSchema({"type": "string", "maxLength": 16, "pattern": WINDOWS_BUILD_PATTERN}),
        ]
        | None
    ) = None
    """Windows build of the images: 10.0.<build> or a Windows Server release name, as listed
    or in lower case: ltsc2016/1607, 1709, 1803, ltsc2019/1809, 1903, 1909, 2004, 20H2,
    ltsc2022/21H2, 23H2, ltsc2025/24H2. Client-only names (21H1, 22H2) are refused.
    Required for HyperV (hosts must be at least this build); optional for Process."""
    handler: (
        Annotated[
            str, StringConstraints(pattern=DNS1123_LABEL_PATTERN, max_length=DNS1123_LABEL_MAX)
        ]
        | None
    ) = None
    """containerd runtime handler name (DNS-1123 label). Default: the profile's name."""
    sandbox: SandboxSpec = SandboxSpec()
    """The pod sandbox's platform."""
    vm: VMSpec | None = None
    """Size and behaviour of the utility VM (HyperV only)."""
    overhead: OverheadSpec | None = None
    """What each pod costs the node beyond its containers (RuntimeClass overhead.podFixed)."""
    scheduling: SchedulingSpec = SchedulingSpec()
    """Which nodes the RuntimeClass sends pods to."""
    annotations: AnnotationsSpec = AnnotationsSpec()
    """Annotation allow-lists of the containerd handler."""
    containerd: ContainerdSpec = ContainerdSpec()
    """The containerd runtime entry and runhcs shim options."""
    canary: CanarySpec = CanarySpec()
    """How node agents prove the handler works before labelling a node ready."""
    rollout: RolloutSpec = RolloutSpec()
    """How a change reaches the nodes: a few at a time, halted by a failure."""
    images: ImagesSpec = ImagesSpec()
    """What admission does with the pods' images when the operator reads registries."""

    @field_validator("windows_build")
    @classmethod
    def _build(cls, value: str | None) -> str | None:
        if value is not None:
            check_profile_build(value)
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        if self.isolation != "HyperV" and self.vm is not None:
            raise FieldError("vm", "is only valid with isolation HyperV (isolation is Process)")
        if self.isolation == "HyperV" and self.windows_build is None:
            raise FieldError(
                "windowsBuild",
                "is required with isolation HyperV: the guest build decides which hosts can "
                "run it (host build >= guest build)",
            )
        policy = self.overhead.policy if self.overhead else None
        if self.isolation == "Process" and policy in ("Baseline", "WholeVM"):
            raise FieldError(
                "overhead.policy",
                f"{policy} prices a utility VM, which isolation Process does not have; "
                "use None or podFixed",
            )
        selector = self.scheduling.node_selector or {}
        arch = self.sandbox.platform.split("/", 1)[1]
        if selector.get(ARCH_LABEL, arch) != arch:
            raise FieldError(
                f"scheduling.nodeSelector[{ARCH_LABEL}]",
                f"{selector[ARCH_LABEL]!r} contradicts sandbox.platform {self.sandbox.platform}",
            )
        pinned = selector.get(WINDOWS_BUILD_LABEL)
        if pinned is not None and self.isolation == "Process" and self.windows_build:
            wanted = parse_windows_build(self.windows_build).label_value
            if pinned != wanted and not self.scheduling.require_ready_label:
                raise FieldError(
                    f"scheduling.nodeSelector[{WINDOWS_BUILD_LABEL}]",
                    f"{pinned!r} contradicts windowsBuild {self.windows_build!r} ({wanted})",
                )
        return self

    @property
    def guest_build(self) -> WindowsBuild | None:
        return parse_windows_build(self.windows_build) if self.windows_build else None

    def effective_vm(self) -> VMSpec | None:
        """The VM settings a HyperV profile runs with (defaults filled), None for Process."""
        if self.isolation != "HyperV":
            return None
        return self.vm or VMSpec()

    def pod_annotation_patterns(self) -> list[str]:
        if self.annotations.pod is not None:
            patterns = list(self.annotations.pod)
        else:
            patterns = [VM_ANNOTATIONS] if self.isolation == "HyperV" else []
        vm = self.effective_vm()
        if vm is not None and vm.sizing == "FromPodLimits":
            # The webhook sizes the VM through these two: they must reach the shim whatever
            # spec.annotations.pod says (exact keys, added when not listed literally).
            patterns += [key for key in SIZING_ANNOTATIONS if key not in patterns]
        return patterns

    def container_annotation_patterns(self) -> list[str]:
        if self.annotations.container is not None:
            return list(self.annotations.container)
        return [CONTAINER_ANNOTATIONS]

    def effective_overhead(self) -> dict[str, str]:
        """overhead.podFixed of the RuntimeClass ({} for none)."""
        if self.overhead is not None and self.overhead.pod_fixed is not None:
            return self.overhead.pod_fixed.as_resource_list()
        vm = self.effective_vm()
        policy = self.overhead.policy if self.overhead else None
        if policy is None:
            if vm is None:
                policy = "None"
            else:
                policy = "WholeVM" if vm.fully_physically_backed else "Baseline"
        if policy == "None" or vm is None:
            return {}
        if policy == "Baseline":
            return dict(BASELINE_OVERHEAD)
        return {
            "cpu": canonical_quantity(str(vm.processor_count or UVM_DEFAULT_PROCESSORS)),
            "memory": canonical_quantity(f"{vm.memory_mb or UVM_DEFAULT_MEMORY_MB}Mi"),
        }
