"""spec.overhead: what each pod costs the node beyond its containers (the RuntimeClass's
overhead.podFixed), explicit or by a policy."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import ConfigDict, model_validator

from wcow_contract.quantity import canonical_quantity
from wcow_contract.v1alpha1.fields import FieldError, Model, Quantity
from wcow_contract.v1alpha1.rules import OVERHEAD_RULES

OverheadPolicy = Literal["None", "Baseline", "WholeVM"]


class PodFixed(Model):
    cpu: Quantity | None = None
    """CPU the runtime costs each pod, e.g. 100m."""
    memory: Quantity | None = None
    """Memory the runtime costs each pod, e.g. 512Mi."""

    def as_resource_list(self) -> dict[str, str]:
        """As the API server will store them (canonical quantities)."""
        return {
            k: canonical_quantity(v)
            for k, v in (("cpu", self.cpu), ("memory", self.memory))
            if v is not None
        }


class OverheadSpec(Model):
    """PodOverhead of the RuntimeClass: either podFixed, or a policy."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": OVERHEAD_RULES})

    pod_fixed: PodFixed | None = None
    """Explicit overhead.podFixed as Kubernetes quantities."""
    policy: OverheadPolicy | None = None
    """None: no overhead. Baseline: 100m CPU and 512Mi for the utility VM (Hyper-V only).
    WholeVM: the VM's full processors and memory (Hyper-V only). Default: WholeVM for a
    physically backed VM, Baseline for other Hyper-V profiles, None for Process."""

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if self.pod_fixed is not None and self.policy is not None:
            raise FieldError("policy", "set either podFixed or policy, not both")
        return self
