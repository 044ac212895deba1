"""spec.vm: the utility VM of a Hyper-V isolated pod, its size (fixed, or from each pod's
limits within bounds) and what hcsshim can honour of it per handler."""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import ConfigDict, Field, field_validator, model_validator

from wcow_contract.catalog.hcs_annotations import (
    ANNOTATION_MEMORY_MB,
    ANNOTATION_PHYSICALLY_BACKED,
    ANNOTATION_PROCESSOR_COUNT,
    ANNOTATION_PROCESSOR_LIMIT,
    ANNOTATION_PROCESSOR_WEIGHT,
    ANNOTATION_TZ_NOINHERIT,
    UVM_DEFAULT_MEMORY_MB,
    UVM_DEFAULT_PROCESSORS,
)
from wcow_contract.v1alpha1.fields import FieldError, Model
from wcow_contract.v1alpha1.rules import VM_RULES

VMSizing = Literal["Fixed", "FromPodLimits"]
OversizedPods = Literal["Refuse", "Warn"]
# The pod annotations a FromPodLimits VM is sized through (pkg/annotations/annotations.go).
SIZING_ANNOTATIONS: Final = (ANNOTATION_PROCESSOR_COUNT, ANNOTATION_MEMORY_MB)


class VMSpec(Model):
    """Utility VM of a Hyper-V isolated pod. Pod annotations allowed by
    spec.annotations.pod can still override these per pod (hcsshim: annotation first)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": VM_RULES})

    processor_count: Annotated[int, Field(ge=1, le=240)] | None = None
    """Virtual processors (runhcs option VmProcessorCount). hcsshim caps it at the host's
    logical processors. Default: 2."""
    memory_mb: Annotated[int, Field(ge=256, le=1048576)] | None = Field(
        default=None, alias="memoryMB"
    )
    """Memory in MB (runhcs option VmMemorySizeInMb); must be even. Default: 1024."""
    processor_limit: Annotated[int, Field(ge=1, le=100000)] | None = None
    """Cap on the VM's processor use, in thousandths of a percent of its processors
    (100000 = 100 %); annotation io.microsoft.virtualmachine.computetopology.processor.limit."""
    processor_weight: Annotated[int, Field(ge=1, le=10000)] | None = None
    """Relative processor weight against other VMs (hcsshim default 100); annotation
    io.microsoft.virtualmachine.computetopology.processor.weight. At least 1: hcsshim
    treats 0 as unset."""
    fully_physically_backed: bool = False
    """Back all VM memory with physical memory, no overcommit: the "reserve" class.
    Annotation io.microsoft.virtualmachine.fullyphysicallybacked."""
    scale_cpu_limits_to_sandbox: bool = True
    """Rescale container CPU limits from the host's processor count to the VM's
    (runhcs option ScaleCpuLimitsToSandbox; containerd's own Hyper-V handler sets it)."""
    inherit_host_timezone: bool = True
    """Run the VM in the host's time zone; false runs it in UTC (annotation
    io.microsoft.virtualmachine.wcow.timezone.noinherit)."""
    sizing: VMSizing = "Fixed"
    """Fixed: every pod's VM has processorCount and memoryMB. FromPodLimits: the admission
    webhook sizes each pod's VM from its containers' limits (at least processorCount and
    memoryMB, at most maxProcessorCount and maxMemoryMB) through the pod annotations
    io.microsoft.virtualmachine.computetopology.processor.count and ...memory.sizeinmb,
    which the handler then always lets through."""
    max_processor_count: Annotated[int, Field(ge=1, le=240)] | None = None
    """Most virtual processors a pod's VM may have (sized from its limits, or asked for by
    the processor.count annotation). Required with FromPodLimits; optional with Fixed,
    where it bounds pods' own annotations (unset: a pod may ask for no more than
    processorCount). At least processorCount."""
    max_memory_mb: Annotated[int, Field(ge=256, le=1048576)] | None = Field(
        default=None, alias="maxMemoryMB"
    )
    """Most memory in MB a pod's VM may have; even. Required with FromPodLimits; optional
    with Fixed, where it bounds pods' own annotations (unset: a pod may ask for no more than
    memoryMB). At least memoryMB."""
    oversized_pods: OversizedPods = "Refuse"
    """A pod whose limits (requests where no limit, summed as for FromPodLimits) need a
    larger VM than it gets (processorCount/memoryMB of a Fixed profile, or the pod's own
    sizing annotations; the VM needs 512 MB of its own besides): Refuse (admission reason
    VMTooSmall) or Warn (admitted with an admission warning naming the need and the VM's
    size)."""

    @field_validator("memory_mb", "max_memory_mb")
    @classmethod
    def _even_memory(cls, value: int | None) -> int | None:
        if value is not None and value % 2:
            raise ValueError(
                f"{value} is odd: hcsshim rounds utility VM memory up to an even number of "
                f"MB; write {value + 1}"
            )
        return value

    @model_validator(mode="after")
    def _sizing_bounds(self) -> Self:
        if self.sizing == "FromPodLimits":
            for field, value in (
                ("maxProcessorCount", self.max_processor_count),
                ("maxMemoryMB", self.max_memory_mb),
            ):
                if value is None:
                    raise FieldError(
                        field, "is required with sizing FromPodLimits (the most a pod may get)"
                    )
        processors = self.processor_count or UVM_DEFAULT_PROCESSORS
        if self.max_processor_count is not None and self.max_processor_count < processors:
            raise FieldError(
                "maxProcessorCount",
                f"{self.max_processor_count} is below processorCount {processors}",
            )
        memory = self.memory_mb or UVM_DEFAULT_MEMORY_MB
        if self.max_memory_mb is not None and self.max_memory_mb < memory:
            raise FieldError("maxMemoryMB", f"{self.max_memory_mb} is below memoryMB {memory}")
        return self

    @property
    def floor_processors(self) -> int:
        """Processors every VM of this profile has at least."""
        return self.processor_count or UVM_DEFAULT_PROCESSORS

    @property
    def floor_memory_mb(self) -> int:
        """Memory (MB) every VM of this profile has at least."""
        return self.memory_mb or UVM_DEFAULT_MEMORY_MB

    def container_annotations(self) -> dict[str, str]:
        """The hcsshim annotations these settings become (DefaultContainerAnnotations)."""
        annotations: dict[str, str] = {}
        if self.processor_limit is not None:
            annotations[ANNOTATION_PROCESSOR_LIMIT] = str(self.processor_limit)
        if self.processor_weight is not None:
            annotations[ANNOTATION_PROCESSOR_WEIGHT] = str(self.processor_weight)
        if self.fully_physically_backed:
            annotations[ANNOTATION_PHYSICALLY_BACKED] = "true"
        if not self.inherit_host_timezone:
            annotations[ANNOTATION_TZ_NOINHERIT] = "true"
        return annotations
