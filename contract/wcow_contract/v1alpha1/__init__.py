"""WindowsRuntimeProfile v1alpha1: the one model every part of wcow-runtime builds from.

The CRD's OpenAPI schema in ``crds/`` is generated from these classes (``wcow crd``). Rules
that span fields are enforced twice on purpose: here (pydantic, for ``wcow render`` and the
operator) and as CEL ``x-kubernetes-validations`` in the CRD (so the API server refuses
them before they are stored). Field docstrings become the CRD descriptions.

One module per part, as the CRD nests them:

- ``profile``: the object (``metadata``, ``spec``, ``status``);
- ``spec``: the desired runtime and the rules across its parts: ``sandbox``, ``vm``,
  ``overhead``, ``scheduling``, ``annotations``, ``containerd``, ``canary``, ``images``,
  ``rollout`` (with ``label_selector``);
- ``status``: conditions, node counts, failures, the rollout's progress;
- ``names`` (group, version, kind), ``defaults`` (what a left-out field means);
- ``fields``: the base model, the field types and label checks the parts share;
- ``rules`` (the CEL rules) and ``schema`` (hooks that shape the generated schema).

The names below are the API's public face; import them from here.
"""

from wcow_contract.v1alpha1.annotations import AnnotationsSpec
from wcow_contract.v1alpha1.canary import (
    IMAGE_REFERENCE_MAX,
    IMAGE_REFERENCE_PATTERN,
    CanarySpec,
    ImageReference,
)
from wcow_contract.v1alpha1.containerd import RUNTIME_PATH_PATTERN, SHIM_BINARY, ContainerdSpec
from wcow_contract.v1alpha1.defaults import (
    BASELINE_OVERHEAD,
    CONTAINER_ANNOTATIONS,
    DEFAULT_PLATFORM,
    DEFAULT_RUNTIME_TYPE,
    DRAIN_TIMEOUT_DEFAULT,
    VM_ANNOTATIONS,
)
from wcow_contract.v1alpha1.fields import FieldError
from wcow_contract.v1alpha1.images import ImagesSpec, UnreachableRegistry
from wcow_contract.v1alpha1.label_selector import LabelSelector, LabelSelectorRequirement
from wcow_contract.v1alpha1.metadata import ObjectMeta
from wcow_contract.v1alpha1.names import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from wcow_contract.v1alpha1.overhead import OverheadPolicy, OverheadSpec, PodFixed
from wcow_contract.v1alpha1.profile import WindowsRuntimeProfile
from wcow_contract.v1alpha1.rollout import DRAIN_ORDER, Drain, RolloutSpec
from wcow_contract.v1alpha1.sandbox import SandboxSpec
from wcow_contract.v1alpha1.scheduling import SchedulingSpec, Toleration
from wcow_contract.v1alpha1.spec import Isolation, WindowsRuntimeProfileSpec
from wcow_contract.v1alpha1.status import (
    Condition,
    ConditionStatus,
    NodeCounts,
    NodeFailure,
    RolloutStatus,
    WindowsRuntimeProfileStatus,
)
from wcow_contract.v1alpha1.vm import SIZING_ANNOTATIONS, OversizedPods, VMSizing, VMSpec

__all__ = [
    "API_VERSION",
    "BASELINE_OVERHEAD",
    "CONTAINER_ANNOTATIONS",
    "DEFAULT_PLATFORM",
    "DEFAULT_RUNTIME_TYPE",
    "DRAIN_ORDER",
    "DRAIN_TIMEOUT_DEFAULT",
    "GROUP",
    "IMAGE_REFERENCE_MAX",
    "IMAGE_REFERENCE_PATTERN",
    "KIND",
    "PLURAL",
    "RUNTIME_PATH_PATTERN",
    "SHIM_BINARY",
    "SHORT_NAMES",
    "SINGULAR",
    "SIZING_ANNOTATIONS",
    "VERSION",
    "VM_ANNOTATIONS",
    "AnnotationsSpec",
    "CanarySpec",
    "Condition",
    "ConditionStatus",
    "ContainerdSpec",
    "Drain",
    "FieldError",
    "ImageReference",
    "ImagesSpec",
    "Isolation",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeCounts",
    "NodeFailure",
    "ObjectMeta",
    "OverheadPolicy",
    "OverheadSpec",
    "OversizedPods",
    "PodFixed",
    "RolloutSpec",
    "RolloutStatus",
    "SandboxSpec",
    "SchedulingSpec",
    "Toleration",
    "UnreachableRegistry",
    "VMSizing",
    "VMSpec",
    "WindowsRuntimeProfile",
    "WindowsRuntimeProfileSpec",
    "WindowsRuntimeProfileStatus",
]
