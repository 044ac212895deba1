"""WindowsRuntimeProfile v1alpha1: the one model every part of wcow-runtime builds from.

The CRD's OpenAPI schema in ``crds/`` is generated from these classes (``wcow crd``). Rules
that span fields are enforced twice on purpose: here (pydantic, for ``wcow render`` and the
operator) and as CEL ``x-kubernetes-validations`` in the CRD (so the API server refuses
them before they are stored). Field docstrings become the CRD descriptions.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from wcow_contract import runhcs_options
from wcow_contract.annotation_patterns import (
    NAME_MAX,
    PLAIN_GLOB_NAME_TOO_LONG,
    PLAIN_GLOB_PATTERN,
    PLAIN_GLOB_PREFIX_TOO_LONG,
    PREFIX_MAX,
    pattern_problem,
)
from wcow_contract.hcs_annotations import (
    ANNOTATION_MEMORY_MB,
    ANNOTATION_PHYSICALLY_BACKED,
    ANNOTATION_PROCESSOR_COUNT,
    ANNOTATION_PROCESSOR_LIMIT,
    ANNOTATION_PROCESSOR_WEIGHT,
    ANNOTATION_TZ_NOINHERIT,
    HOST_PROCESS_PREFIX,
    refused_default_keys,
)
from wcow_contract.quantity import (
    MAX_QUANTITY_TEXT,
    QUANTITY_PATTERN,
    canonical_quantity,
    parse_quantity,
)
from wcow_contract.validation import (
    DNS1123_LABEL_MAX,
    DNS1123_LABEL_PATTERN,
    DNS1123_SUBDOMAIN_MAX,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_LONG_PREFIX,
    QUALIFIED_NAME_PATTERN,
    is_dns1123_label,
    is_dns1123_subdomain,
    label_value_problem,
    metadata_annotations_problem,
    qualified_name_problem,
)
from wcow_contract.windows_builds import (
    BUILD_ALIASES,
    WINDOWS_BUILD_LABEL,
    WINDOWS_BUILD_PATTERN,
    WindowsBuild,
    check_profile_build,
    parse_windows_build,
)

GROUP = "runtime.wcow.dev"
VERSION = "v1alpha1"
API_VERSION: Final = "runtime.wcow.dev/v1alpha1"
KIND: Final = "WindowsRuntimeProfile"
PLURAL = "windowsruntimeprofiles"
SINGULAR = "windowsruntimeprofile"
SHORT_NAMES = ("wrp",)

DEFAULT_RUNTIME_TYPE: Final = "io.containerd.runhcs.v1"
DEFAULT_PLATFORM: Final = "windows/amd64"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
READY_LABEL_PREFIX = f"{GROUP}/"

# hcsshim's utility VM defaults (internal/uvm/create.go newDefaultOptions).
UVM_DEFAULT_MEMORY_MB = 1024
UVM_DEFAULT_PROCESSORS = 2
# What a utility VM costs the node beyond the pod's own requests when its memory is
# virtually backed: the figure sig-windows' windows-testing uses for its Hyper-V class.
BASELINE_OVERHEAD = {"cpu": "100m", "memory": "512Mi"}

# Annotation allow-lists as in containerd's Windows defaults (config_windows.go, 1.7+).
VM_ANNOTATIONS = "io.microsoft.virtualmachine.*"
CONTAINER_ANNOTATIONS = "io.microsoft.container.*"


Isolation = Literal["Process", "HyperV"]
OverheadPolicy = Literal["None", "Baseline", "WholeVM"]
ConditionStatus = Literal["True", "False", "Unknown"]

MAX_STRING = 1024  # generous bound on free text; keeps CEL cost estimates finite
MAX_LIST = 64
# The API server decodes a JSON integer into int64; a larger one becomes a float, which an
# integer field refuses.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

FreeText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_STRING)]
Int64 = Annotated[
    int, Field(ge=INT64_MIN, le=INT64_MAX), WithJsonSchema({"type": "integer", "format": "int64"})
]


def _quantity_text(value: object) -> str:
    # YAML gives `cpu: 1` as an int; the API takes int-or-string (x-kubernetes-int-or-string:
    # a JSON integer or a string, nothing else); the RuntimeClass wants text.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | str)
        or (isinstance(value, int) and value > INT64_MAX)
    ):
        raise ValueError(
            f"{value!r:.80} is not a Kubernetes quantity: write a string such as 250m, 1 or "
            "512Mi, or an integer up to 2^63-1"
        )
    parse_quantity(value)  # QuantityError (a ValueError) says why not, the value bounded
    return str(value)


Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": MAX_QUANTITY_TEXT,
            # The pattern applies to strings only; an integer is checked here (and a number
            # such as 1.0 fails here, as the model refuses it).
            "x-kubernetes-validations": [
                {"rule": "type(self) == string || self >= 0", "message": "must not be negative"}
            ],
        }
    ),
]


class FieldError(ValueError):
    """A rule that spans fields, blamed on the one field a person should change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """A CEL x-kubernetes-validations entry for the generated CRD."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


class _Model(BaseModel):
    # strict: a number is a JSON number and a boolean a JSON boolean, as the API server's
    # schema has them; "4096", "yes" or 2.0 are refused, not coerced.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        use_attribute_docstrings=True,
        validate_default=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # The API server drops a null given for a field its schema declares (no field is
        # nullable) before it validates, so null means absent (apiextensions-apiserver
        # v0.35.4 pkg/apiserver/schema/defaulting/prunenulls.go). An unknown key stays, null
        # or not: the server refuses it too (strict field validation, as kubectl sends).
        if not isinstance(data, dict) or None not in data.values():
            return data
        known = _field_keys(cls)
        return {key: value for key, value in data.items() if value is not None or key not in known}


@functools.cache
def _field_keys(model: type[BaseModel]) -> frozenset[str]:
    """A model's field names and aliases (worked out once per class: every model of every
    profile of every pass asks)."""
    fields = model.model_fields
    return frozenset(fields) | {info.alias for info in fields.values() if info.alias}


def without_nulls(value: Any) -> Any:
    """A map with its null values dropped, as the API server prunes them."""
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if item is not None}
    return value


# spec.sandbox.image was removed: it rendered the runhcs option SandboxImage, which no
# hcsshim reads and no containerd uses (the pause image is node-wide).
_SANDBOX_IMAGE_WHY = (
    "it set the runhcs option SandboxImage, which no hcsshim reads and no "
    "containerd uses, so it never chose the pause image. The pause (sandbox) image is one per "
    "node: set sandbox_image in the CRI plugin of config.toml on containerd 1.x, or "
    "pinned_images.sandbox in the io.containerd.cri.v1.images plugin on containerd 2.x, and "
    "delete spec.sandbox.image"
)
SANDBOX_IMAGE_REMOVED = f"was removed: {_SANDBOX_IMAGE_WHY}"
ARM64_REFUSED = (
    "is not supported: the wcow-runtime node agent runs only on amd64 nodes (its DaemonSet "
    "selects kubernetes.io/arch=amd64), so no node would ever prove a windows/arm64 handler "
    "ready; use windows/amd64"
)


def _sandbox_schema(schema: JsonDict) -> None:
    # Declared only so the API server refuses it with the reason instead of pruning it quietly.
    properties = schema.setdefault("properties", {})
    assert isinstance(properties, dict)
    properties["image"] = {
        "type": "string",
        "maxLength": MAX_STRING,
        "description": f"Removed, and refused when set: {_SANDBOX_IMAGE_WHY}.",
    }
    schema["x-kubernetes-validations"] = [
        cel("!has(self.image)", f"spec.sandbox.image {SANDBOX_IMAGE_REMOVED}", ".image"),
        # The server applies no defaults: a sandbox without platform is windows/amd64.
        cel(
            "!has(self.platform) || self.platform == 'windows/amd64'",
            f"{ARM64_REFUSED}",
            ".platform",
        ),
    ]


class SandboxSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_sandbox_schema)

    platform: Literal["windows/amd64"] = DEFAULT_PLATFORM
    """OS/architecture of the sandbox (runhcs option SandboxPlatform); also selects
    nodes by kubernetes.io/arch. Only windows/amd64: the node agent runs on amd64 nodes."""

    @model_validator(mode="before")
    @classmethod
    def _removed_image(cls, data: Any) -> Any:
        if isinstance(data, dict) and "image" in data:
            if data["image"] is not None:
                raise FieldError("image", SANDBOX_IMAGE_REMOVED)
            data = {key: value for key, value in data.items() if key != "image"}  # null: absent
        return data

    @field_validator("platform", mode="before")
    @classmethod
    def _amd64_only(cls, value: Any) -> Any:
        if value == "windows/arm64":
            raise ValueError(f"{value} {ARM64_REFUSED}")
        return value


VMSizing = Literal["Fixed", "FromPodLimits"]
OversizedPods = Literal["Refuse", "Warn"]
# The pod annotations a FromPodLimits VM is sized through (pkg/annotations/annotations.go).
SIZING_ANNOTATIONS: Final = (ANNOTATION_PROCESSOR_COUNT, ANNOTATION_MEMORY_MB)
_SIZING_RULES = (
    cel(
        "!has(self.sizing) || self.sizing != 'FromPodLimits' || "
        "(has(self.maxProcessorCount) && has(self.maxMemoryMB))",
        "sizing FromPodLimits needs maxProcessorCount and maxMemoryMB (the most a pod may get)",
        ".sizing",
    ),
    cel(
        "!has(self.maxProcessorCount) || self.maxProcessorCount >= "
        f"(has(self.processorCount) ? self.processorCount : {UVM_DEFAULT_PROCESSORS})",
        f"maxProcessorCount must be at least processorCount (default {UVM_DEFAULT_PROCESSORS})",
        ".maxProcessorCount",
    ),
    cel(
        "!has(self.maxMemoryMB) || (self.maxMemoryMB % 2 == 0 && self.maxMemoryMB >= "
        f"(has(self.memoryMB) ? self.memoryMB : {UVM_DEFAULT_MEMORY_MB}))",
        f"maxMemoryMB must be even and at least memoryMB (default {UVM_DEFAULT_MEMORY_MB})",
        ".maxMemoryMB",
    ),
)


class VMSpec(_Model):
    """Utility VM of a Hyper-V isolated pod. Pod annotations allowed by
    spec.annotations.pod can still override these per pod (hcsshim: annotation first)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.memoryMB) || self.memoryMB % 2 == 0",
                    "memoryMB must be even: hcsshim rounds utility VM memory up to 2 MB",
                    ".memoryMB",
                ),
                *_SIZING_RULES,
            ]
        }
    )

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


class PodFixed(_Model):
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


class OverheadSpec(_Model):
    """PodOverhead of the RuntimeClass: either podFixed, or a policy."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!(has(self.podFixed) && has(self.policy))",
                    "set either podFixed or policy, not both",
                )
            ]
        }
    )

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


# Label keys and values as the API server can check them (the model checks them with
# qualified_name_problem and label_value_problem, whose messages say more).
_SHORT_LABEL_PREFIX = cel(
    f"!self.matches('{QUALIFIED_NAME_LONG_PREFIX}')",
    f"the prefix of a label key (before '/') is at most {DNS1123_SUBDOMAIN_MAX} characters",
)
LabelValue = Annotated[
    str,
    StringConstraints(max_length=DNS1123_LABEL_MAX),
    WithJsonSchema(
        {"type": "string", "maxLength": DNS1123_LABEL_MAX, "pattern": LABEL_VALUE_PATTERN}
    ),
]


class Toleration(_Model):
    """A toleration added to pods of this RuntimeClass (core/v1 Toleration)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) "
                    "|| self.value == ''",
                    "value must be empty when operator is Exists",
                ),
                cel(
                    "!has(self.tolerationSeconds) || (has(self.effect) "
                    "&& self.effect == 'NoExecute')",
                    "tolerationSeconds is only allowed with effect NoExecute",
                ),
                cel(
                    "(has(self.key) && self.key != '') || "
                    "(has(self.operator) && self.operator == 'Exists')",
                    "an empty key needs operator Exists (tolerate all)",
                    ".operator",
                ),
            ]
        }
    )

    key: (
        Annotated[
            str,
            StringConstraints(max_length=316),
            WithJsonSchema(
                {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": f"^({QUALIFIED_NAME_PATTERN[1:-1]})?$",  # or empty
                    "x-kubernetes-validations": [_SHORT_LABEL_PREFIX],
                }
            ),
        ]
        | None
    ) = None
    """Taint key; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Equal (the default) or Exists."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: Int64 | None = None
    """With effect NoExecute: how long the pod stays after the taint appears."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.key:
            problem = qualified_name_problem(self.key)
            if problem:
                raise FieldError("key", f"{self.key!r} is not a valid label key: {problem}")
        elif self.operator != "Exists":
            raise FieldError("operator", "an empty key needs operator Exists (tolerate all)")
        if self.operator == "Exists" and self.value:
            raise FieldError("value", f"must be empty when operator is Exists, not {self.value!r}")
        if self.value:
            problem = label_value_problem(self.value)
            if problem:
                raise FieldError("value", f"{self.value!r}: {problem}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise FieldError("tolerationSeconds", "is only allowed with effect NoExecute")
        return self

    def as_kubernetes(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def _check_label_key(key: str) -> None:
    problem = qualified_name_problem(key)
    if problem:
        raise FieldError(f"[{key}]", f"invalid label key: {problem}")


def _check_label_value(key: str, label: str) -> None:
    problem = label_value_problem(label)
    if problem:
        raise FieldError(f"[{key}]", f"{label!r:.80}: {problem}")


def _checked_labels(value: dict[str, str] | None) -> dict[str, str] | None:
    for key, label in (value or {}).items():
        _check_label_key(key)
        _check_label_value(key, label)
    return value


def _node_selector_rules() -> list[JsonDict]:
    """The CRD's twin of SchedulingSpec._labels and of the arch check of the spec."""
    arch = DEFAULT_PLATFORM.split("/", 1)[1]
    return [
        cel(
            f"self.all(k, k.matches('{QUALIFIED_NAME_PATTERN}') && "
            f"!k.matches('{QUALIFIED_NAME_LONG_PREFIX}'))",
            "a key is not a valid label key: [prefix/]name, a lowercase DNS subdomain of at "
            f"most {DNS1123_SUBDOMAIN_MAX} characters before the '/', 1-63 letters, digits, "
            "'-', '_' or '.' after it, starting and ending with a letter or digit",
        ),
        cel(
            f"!self.exists(k, k.startsWith('{READY_LABEL_PREFIX}'))",
            f"labels under {READY_LABEL_PREFIX} are managed by wcow-runtime; use "
            "requireReadyLabel instead",
        ),
        cel(
            f"!('{OS_LABEL}' in self) || self['{OS_LABEL}'] == 'windows'",
            f"{OS_LABEL} must be 'windows' (or omitted)",
        ),
        cel(
            f"!('{ARCH_LABEL}' in self) || self['{ARCH_LABEL}'] == '{arch}'",
            f"{ARCH_LABEL} must be '{arch}' (or omitted): it contradicts sandbox.platform "
            f"{DEFAULT_PLATFORM}",
        ),
    ]


class SchedulingSpec(_Model):
    node_selector: (
        Annotated[
            dict[str, LabelValue],
            Field(
                max_length=MAX_LIST,
                json_schema_extra={"x-kubernetes-validations": _node_selector_rules()},
            ),
            BeforeValidator(without_nulls),
        ]
        | None
    ) = None
    """Extra node labels the pods need, merged with the generated ones
    (kubernetes.io/os=windows, kubernetes.io/arch, and the handler's ready label). Node
    agents apply the handler only on nodes whose labels match every pair; the others never
    write, restart or report for it."""
    tolerations: Annotated[list[Toleration], Field(max_length=MAX_LIST)] | None = None
    """Tolerations added to the pods, e.g. for an os=windows:NoSchedule taint."""
    require_ready_label: bool = True
    """Send pods only to nodes whose agent proved the handler works (node label
    runtime.wcow.dev/<handler>=ready). When false, a Process profile with a windowsBuild
    pins node.kubernetes.io/windows-build instead, and a HyperV profile selects all
    Windows nodes of its architecture."""

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, label in (value or {}).items():
            _check_label_key(key)
            if key.startswith(READY_LABEL_PREFIX):
                raise FieldError(
                    f"[{key}]",
                    f"labels under {READY_LABEL_PREFIX} are managed by wcow-runtime; use "
                    "requireReadyLabel instead",
                )
            if key == OS_LABEL and label != "windows":
                raise FieldError(f"[{key}]", f"must be 'windows' (or omitted), not {label!r}")
            _check_label_value(key, label)
        return value


def _annotation_pattern(pattern: str) -> str:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise ValueError(problem)
    return pattern


# pattern_problem on the API server: exact for globs with no '[' and no '\\' (see
# annotation_patterns.PLAIN_GLOB_PATTERN); others are the operator's to judge.
_PLAIN_GLOB_RULE = cel(
    "self.contains('[') || self.contains('\\\\') || "
    f"(self.matches('{PLAIN_GLOB_PATTERN}') && !self.matches('{PLAIN_GLOB_NAME_TOO_LONG}') "
    f"&& !self.matches('{PLAIN_GLOB_PREFIX_TOO_LONG}'))",
    "the pattern can match no annotation key: keys are [prefix/]name, the prefix a DNS "
    f"subdomain of at most {PREFIX_MAX} characters, the name 1-{NAME_MAX} letters, digits, "
    "'-', '_' or '.', starting and ending with a letter or digit ('*' and '?' stand for any)",
)
AnnotationPattern = Annotated[
    FreeText,
    AfterValidator(_annotation_pattern),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_STRING,
            "x-kubernetes-validations": [_PLAIN_GLOB_RULE],
        }
    ),
]
# The part of pattern_problem the API server can check cheaply: at most one '/'.
_ONE_SLASH = "!{0}.exists(p, p.matches('/.*/'))"
_ONE_SLASH_MESSAGE = (
    "a pattern has more than one '/': annotation keys are [prefix/]name, so it can never match"
)


class AnnotationsSpec(_Model):
    """Which pod and container annotations containerd passes to the shim (glob patterns,
    Go path.Match syntax). Omitted: containerd's Windows defaults for the isolation.
    A pattern no Kubernetes annotation key can match (more than one '/', a prefix that is
    not a DNS subdomain, a name that is not 1-63 letters, digits, '-', '_' or '.') or a
    malformed glob (containerd ignores its error and matches nothing) is refused."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(f"!has(self.{field}) || {_ONE_SLASH.format('self.' + field)}",
                    _ONE_SLASH_MESSAGE, f".{field}")
                for field in ("pod", "container")
            ]
        }
    )  # fmt: skip

    pod: Annotated[list[AnnotationPattern], Field(max_length=MAX_LIST)] | None = None
    """Pod annotations allowed through (pod_annotations). Default: io.microsoft.virtualmachine.*
    for HyperV, none for Process. [] allows none."""
    container: Annotated[list[AnnotationPattern], Field(max_length=MAX_LIST)] | None = None
    """Container annotations allowed through (container_annotations). Default:
    io.microsoft.container.*. [] allows none."""


# containerd runs the handler's shim as its own account (SYSTEM): runtime_type names the
# binary (containerd-shim-<name>-<version>.exe, looked up beside containerd.exe and on PATH)
# and runtime_path, when set, replaces that lookup with any absolute path, a UNC share's
# included (containerd runtime/v2/manager.go resolveRuntimePath, v1.7.34; the same in 2.x).
# So both are pinned to the runhcs shim: the options table is runhcs.Options, which only it
# reads, and a path may only name that shim under Program Files, which only administrators
# can write to.
SHIM_BINARY: Final = "containerd-shim-runhcs-v1.exe"
RUNTIME_PATH_PATTERN: Final = (
    r"^[A-Za-z]:\\Program Files\\([A-Za-z0-9_()+-][A-Za-z0-9 ._()+-]{0,63}\\){0,8}"
    r"containerd-shim-runhcs-v1\.exe$"
)
_RUNTIME_PATH = re.compile(RUNTIME_PATH_PATTERN)


def _runtime_type(value: object) -> object:
    if value != DEFAULT_RUNTIME_TYPE:
        raise ValueError(
            f"is not supported: only {DEFAULT_RUNTIME_TYPE}. The handler's "
            "options are runhcs options, which only the runhcs shim reads, and another "
            "runtime type makes containerd run another binary as SYSTEM"
        )
    return value


def _runtime_path(value: str) -> str:
    if not _RUNTIME_PATH.fullmatch(value):
        raise ValueError(
            "is not a runhcs shim under Program Files: write "
            f"<drive>:\\Program Files\\<folders>\\{SHIM_BINARY} (folders of letters, "
            "digits, spaces and ._()+-, not starting with a dot). containerd runs this file as "
            "SYSTEM, so it may only be the runhcs shim in a folder only administrators can write"
        )
    return value


# The runhcs options a profile may set through spec.containerd.options (those without a
# refusal in runhcs_options), each described for the CRD. The CRD declares them with their
# types, so the API server refuses the others as unknown fields (kubectl's strict field
# validation) or drops them, as it does for every misspelt field; the model refuses them,
# saying what to write instead.
_OPTION_DESCRIPTIONS = {
    "NCProxyAddr": "Named pipe of the network configuration proxy, ncproxy, on the node: "
    "\\\\.\\pipe\\NAME (runhcs option NCProxyAddr), passed on as an annotation when a pod "
    "sets none.",
    "DefaultContainerAnnotations": "Annotations added to every container of the handler that "
    "does not carry them (runhcs option DefaultContainerAnnotations). Not the HostProcess "
    "family, not what spec.vm sets (processor count, limit and weight, memory size and "
    "backing, time zone), not host paths or ncproxy: those would act on every pod whatever "
    "the admission webhook allows.",
    "ScrubLogs": "Scrub the shim's logs (runhcs option ScrubLogs); see options.",
}
_OPTION_TYPES: dict[type, JsonDict] = {
    bool: {"type": "boolean"},
    str: {"type": "string"},
    dict: {"type": "object", "additionalProperties": {"type": "string"}},
}


def _options_schema() -> JsonDict:
    allowed = sorted(
        name for name, spec in runhcs_options.RUNHCS_OPTIONS.items() if spec.refusal is None
    )
    assert allowed == sorted(_OPTION_DESCRIPTIONS), "describe every option a profile may set"
    properties: JsonDict = {
        name: {
            **_OPTION_TYPES[runhcs_options.RUNHCS_OPTIONS[name].kind],
            "description": _OPTION_DESCRIPTIONS[name],
            **_OPTION_TWINS.get(name, {}),
        }
        for name in allowed
    }
    return {"type": "object", "properties": properties}


def _default_annotations_rule() -> JsonDict:
    """The CRD's twin of runhcs_options.default_annotations_problem: no key that the
    catalogue refuses as a default for every pod (exact keys, as hcsshim reads them)."""
    refused = ", ".join(f"'{key}'" for key in refused_default_keys())
    return cel(
        f"self.all(k, !k.startsWith('{HOST_PROCESS_PREFIX}') && !(k in [{refused}]))",
        "sets an annotation a profile may not add to every pod: the HostProcess family, "
        "what spec.vm sets (use its fields), host paths and ncproxy (wcow validate names the "
        "key and why)",
    )


# Server-side twins of the option checks in runhcs_options, so the API server refuses what
# the model refuses.
_OPTION_TWINS: dict[str, JsonDict] = {
    "NCProxyAddr": {"pattern": runhcs_options.NCPROXY_PIPE_PATTERN},
    "DefaultContainerAnnotations": {
        "maxProperties": runhcs_options.MAX_DEFAULT_ANNOTATIONS,
        "x-kubernetes-validations": [_default_annotations_rule()],
    },
}


class ContainerdSpec(_Model):
    runtime_type: Annotated[Literal["io.containerd.runhcs.v1"], BeforeValidator(_runtime_type)] = (
        DEFAULT_RUNTIME_TYPE
    )
    """containerd runtime_type of the handler: only io.containerd.runhcs.v1 (the shim the
    runhcs options are for)."""
    runtime_path: (
        Annotated[
            str,
            AfterValidator(_runtime_path),
            WithJsonSchema({"type": "string", "maxLength": 600, "pattern": RUNTIME_PATH_PATTERN}),
        ]
        | None
    ) = None
    """Absolute path of the runhcs shim (runtime_path), when it is not next to
    containerd.exe: <drive>:\\Program Files\\...\\containerd-shim-runhcs-v1.exe (containerd
    runs it as SYSTEM, so no other file and no other folder)."""
    debug: bool = False
    """Shim debug logging (runhcs option Debug)."""
    debug_type: Literal["Npipe", "Etw"] | None = None
    """Where shim debug output goes (runhcs option DebugType). File is not offered: the
    shim panics on it."""
    log_level: Literal["trace", "debug", "info", "warning", "error", "fatal", "panic"] | None = None
    """Shim log level (runhcs option LogLevel); overrides debug."""
    io_retry_timeout_seconds: Annotated[int, Field(ge=0, le=86400)] | None = None
    """How long shims retry their stdio pipes while containerd restarts (runhcs option
    IoRetryTimeoutInSec); 0 retries forever, which is hcsshim's default."""
    options: Annotated[dict[str, Any], WithJsonSchema(_options_schema())] | None = None
    """Further runhcs options by their exact Go field name (NCProxyAddr, ScrubLogs,
    DefaultContainerAnnotations). Unknown or misspelt names are unknown
    fields, refused by wcow validate and by kubectl apply (containerd would silently ignore
    them), and so are other casings (containerd 2.x decodes any casing, 1.x only
    lower-first and lowercase, so they would act on some nodes only). ScrubLogs is written
    only when set. Unset: shims of hcsshim up to v0.15.0-rc.1 do not scrub their logs,
    v0.15.0-rc.2 and later do. true: scrubbing on (containerd 1.7+;
    1.6 drops the key). false: off, but a v0.15.0-rc.2+ shim sees it only when containerd's
    own hcsshim has the optional field (containerd 2.4+)."""

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        checked: dict[str, Any] = {}
        for key, option in value.items():
            if key in _OPTION_DESCRIPTIONS and option is None:
                continue  # a declared field: the API server drops its null
            if key in _OPTION_DESCRIPTIONS and isinstance(option, dict):
                option = without_nulls(option)  # noqa: PLW2901 - the map as the server keeps it
            try:
                checked[key] = runhcs_options.check_option(key, option)
            except ValueError as error:
                raise FieldError(key, str(error)) from None
        return checked


# An image reference as containerd parses it (distribution/reference's grammar: optional
# registry host and port, lowercase path components, optional tag and sha256 digest).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
IMAGE_REFERENCE_PATTERN: Final = (
    rf"^(?:(?:{_HOST}(?:\.{_HOST})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_IMAGE_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
IMAGE_REFERENCE_MAX = 512


def _image_reference(value: str) -> str:
    if len(value) > IMAGE_REFERENCE_MAX or not _IMAGE_REFERENCE.fullmatch(value):
        raise ValueError(
            "is not an image reference: [registry[:port]/]path[:tag][@sha256:"
            f"<64 hex>] with lowercase path components, at most {IMAGE_REFERENCE_MAX} characters"
        )
    return value


ImageReference = Annotated[
    str,
    AfterValidator(_image_reference),
    WithJsonSchema(
        {"type": "string", "maxLength": IMAGE_REFERENCE_MAX, "pattern": IMAGE_REFERENCE_PATTERN}
    ),
]


class CanarySpec(_Model):
    enabled: bool = True
    """Start a test sandbox with the handler on each node before labelling it ready."""
    timeout_seconds: Annotated[int, Field(ge=10, le=1800)] = 180
    """How long one canary may take (pulling the sandbox image included)."""
    image: ImageReference | None = None
    """Image the canary pulls through CRI as the kubelet does and runs in its sandbox under
    the handler (proving that the class's images run, and reading the VM's processor count
    inside); a pull or start that fails leaves the handler Failed. Omitted: the agent's
    image for the guest build (chart agent.canaryImages), else the sandbox alone is checked.
    Every node's agent pulls it and runs it as the image's ContainerUser (no HostProcess, no
    mounts), outside Kubernetes admission: name an image you trust, ideally by digest."""


UnreachableRegistry = Literal["Admit", "Refuse"]


class ImagesSpec(_Model):
    """What the admission webhook does with the images of this class's pods when it reads
    them from their registries (operator flag --resolve-images; off by default)."""

    unreachable_registry: UnreachableRegistry | None = None
    """When an image cannot be read (registry down or slow, 401, 404, 5xx, a manifest too
    large or malformed): Admit lets the pod through with an admission warning and counts it
    in wcow_admission_images_unchecked_total; Refuse refuses it (reason ImageUnresolved).
    Default: the operator's --unreachable-registry (Admit unless set). Refuse wins if either
    asks for it."""


MAX_UNAVAILABLE_PATTERN = r"^(100|[1-9][0-9]?)%$"

Drain = Literal["None", "Cordon", "Evict"]
# Strongest first: a node's drain when several changed profiles disagree.
DRAIN_ORDER: Final[tuple[Drain, ...]] = ("Evict", "Cordon", "None")
DRAIN_TIMEOUT_DEFAULT: Final = 600


class LabelSelectorRequirement(_Model):
    """One requirement of a label selector (meta/v1 LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!(self.operator in ['In', 'NotIn']) || (has(self.values) && "
                    "size(self.values) > 0)",
                    "operators In and NotIn need at least one value",
                    ".values",
                ),
                cel(
                    "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || "
                    "size(self.values) == 0",
                    "operators Exists and DoesNotExist take no values",
                    ".values",
                ),
            ]
        }
    )

    key: Annotated[
        str,
        StringConstraints(min_length=1, max_length=316),
        WithJsonSchema(
            {
                "type": "string",
                "maxLength": 316,
                "pattern": QUALIFIED_NAME_PATTERN,
                "x-kubernetes-validations": [_SHORT_LABEL_PREFIX],
            }
        ),
    ]
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In and NotIn need values; Exists and DoesNotExist take none."""
    values: Annotated[list[LabelValue], Field(max_length=MAX_LIST)] | None = None
    """The values for In and NotIn."""

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        _check_label_key(value)
        return value

    @model_validator(mode="after")
    def _values(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise FieldError(".values", f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise FieldError(".values", f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Model):
    """A label selector (meta/v1 LabelSelector): every requirement must hold; empty selects
    every pod."""

    match_labels: (
        Annotated[
            dict[str, LabelValue],
            Field(
                max_length=MAX_LIST,
                json_schema_extra={
                    "x-kubernetes-validations": [
                        cel(
                            f"self.all(k, k.matches('{QUALIFIED_NAME_PATTERN}') && "
                            f"!k.matches('{QUALIFIED_NAME_LONG_PREFIX}'))",
                            "label keys are [prefix/]name: a DNS subdomain prefix of at most "
                            f"{DNS1123_SUBDOMAIN_MAX} characters, a name of at most 63",
                        )
                    ]
                },
            ),
            BeforeValidator(without_nulls),
        ]
        | None
    ) = None
    """Labels a pod must carry with exactly these values."""
    match_expressions: (
        Annotated[list[LabelSelectorRequirement], Field(max_length=MAX_LIST)] | None
    ) = None
    """Further requirements on a pod's labels."""

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _checked_labels(value)


class RolloutSpec(_Model):
    """How a change of this profile's handler reaches the nodes."""

    max_unavailable: (
        Annotated[
            int | str,
            WithJsonSchema(
                {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-validations": [
                        cel(
                            f"type(self) == int ? self >= 1 : "
                            f"self.matches('{MAX_UNAVAILABLE_PATTERN}')",
                            "maxUnavailable must be a count (at least 1) or a percentage "
                            "from 1% to 100%",
                        )
                    ],
                }
            ),
        ]
        | None
    ) = None
    """Nodes that may apply a change at once: a count (at least 1) or a percentage of the
    Windows nodes with an agent, rounded up ("10%"). Default: the operator's
    --max-unavailable. When one plan change touches several profiles, the smallest wins."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | str | None):
            raise ValueError(f"must be a count or a percentage such as '10%', got {value!r}")  # noqa: TRY004 - pydantic reports ValueError
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        if isinstance(value, str) and not re.fullmatch(MAX_UNAVAILABLE_PATTERN, value):
            raise ValueError(f"must be a count or a percentage from 1% to 100%, got {value!r}")
        return value

    drain: Drain | None = None
    """What happens to a node's pods before its containerd restarts for a change of this
    profile: None (they keep running; see the README's drain section for what a restart
    does to them), Cordon (no new pods are scheduled to the node while it applies; it is
    uncordoned after, also after a failure), or Evict (cordon, then evict this class's pods
    through the Eviction API, honouring PodDisruptionBudgets, and wait until they are gone).
    Default: the operator's --drain. When one node takes changes of several profiles, the
    strongest wins (Evict, then Cordon, then None)."""
    drain_timeout_seconds: Annotated[int, Field(ge=30, le=86400)] | None = None
    """With Evict: how long a node's pods may take to leave (an eviction refused by a
    PodDisruptionBudget is retried until then); past it the node fails its turn with reason
    DrainTimeout and the rollout halts. Default 600."""
    evict_pod_selector: LabelSelector | None = None
    """With Evict: only pods of this class whose labels match are evicted (others keep
    running through the restart). Omitted: every pod of the class on the node."""


def _build_pin_rule() -> JsonDict:
    """The CRD's twin of the windows-build pin check of WindowsRuntimeProfileSpec: the label
    value a windowsBuild stands for, from the same catalog (any spelling the pattern allows)."""
    aliases = sorted(
        {(name, build) for name, build in BUILD_ALIASES.items()}
        | {(name.lower(), build) for name, build in BUILD_ALIASES.items()}
    )
    label_of = ", ".join(f"'{name}': '10.0.{build}'" for name, build in aliases)
    selector = "self.scheduling.nodeSelector"
    pinned = (
        "self.isolation == 'Process' && has(self.windowsBuild) && has(self.scheduling) && "
        f"has({selector}) && '{WINDOWS_BUILD_LABEL}' in {selector} && "
        "has(self.scheduling.requireReadyLabel) && !self.scheduling.requireReadyLabel"
    )
    wanted = f"(self.windowsBuild.startsWith('10.0.') ? self.windowsBuild : {{{label_of}}}[self.windowsBuild])"  # noqa: E501
    return cel(
        f"!({pinned}) || {selector}['{WINDOWS_BUILD_LABEL}'] == {wanted}",
        f"scheduling.nodeSelector[{WINDOWS_BUILD_LABEL}] contradicts windowsBuild (with "
        "requireReadyLabel false a Process profile selects its windowsBuild's nodes itself)",
        ".scheduling.nodeSelector",
    )


_BUILD_PIN_RULE = _build_pin_rule()


class WindowsRuntimeProfileSpec(_Model):
    """The desired Windows runtime: one containerd handler and its RuntimeClass."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.isolation == 'HyperV' || !has(self.vm)",
                    "vm is only valid with isolation HyperV",
                    ".vm",
                ),
                cel(
                    "self.isolation != 'HyperV' || has(self.windowsBuild)",
                    "windowsBuild is required with isolation HyperV (the guest build)",
                    ".windowsBuild",
                ),
                cel(
                    "self.isolation == 'HyperV' || !has(self.overhead) || "
                    "!has(self.overhead.policy) || self.overhead.policy == 'None'",
                    "overhead policies Baseline and WholeVM need isolation HyperV",
                    ".overhead.policy",
                ),
                _BUILD_PIN_RULE,
            ]
        }
    )

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


class RolloutStatus(_Model):
    plan_hash: str
    """The plan being rolled out."""
    updated: int = 0
    """Windows nodes (with an agent) that run this plan."""
    total: int = 0
    """Windows nodes with an agent."""
    progress: str = ""
    """updated/total, for kubectl get."""
    state: Literal["Progressing", "Complete", "Halted"] = "Progressing"


class NodeCounts(_Model):
    eligible: int = 0
    """Windows nodes whose build and features can run the handler."""
    ready: int = 0
    """Nodes whose agent applied the handler and passed the canary."""
    failed: int = 0
    """Nodes where applying or the canary failed."""


class NodeFailure(_Model):
    node: Annotated[str, StringConstraints(max_length=DNS1123_SUBDOMAIN_MAX)]
    reason: Annotated[str, StringConstraints(max_length=128)]
    message: Annotated[str, StringConstraints(max_length=MAX_STRING)] = ""


class Condition(_Model):
    """A status condition by the Kubernetes API conventions."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    status: ConditionStatus
    reason: Annotated[
        str, StringConstraints(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    ]
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    last_transition_time: Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class WindowsRuntimeProfileStatus(_Model):
    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    # An atomic list, not x-kubernetes-list-type=map: the operator is its one writer and
    # always writes the whole list (a merge patch replaces arrays), so per-type ownership
    # in managedFields bought nothing, and tracking it cost kube-apiserver about a fifth of
    # each status write (benchmarks/write_costs.py; Kubernetes 1.35).
    conditions: Annotated[list[Condition], Field(max_length=16)] = []
    handler: str | None = None
    runtime_class_name: str | None = None
    nodes: NodeCounts = NodeCounts()
    failures: Annotated[list[NodeFailure], Field(max_length=10)] = []
    """The first nodes that failed, with the reason."""
    rollout: RolloutStatus | None = None
    """Progress of the last plan change that touched this profile's handler."""


def _null_strings_empty(value: Any) -> Any:
    # ObjectMeta is a Go struct on the server: a null label or annotation value decodes as "".
    if isinstance(value, dict):
        return {key: "" if item is None else item for key, item in value.items()}
    return value


StringMap = Annotated[dict[str, str], BeforeValidator(_null_strings_empty)]


class ObjectMeta(_Model):
    """The parts of metadata the renderers use, and labels and annotations checked as the
    API server checks them. Other fields are ignored: metadata is the API server's, and it
    gains fields over releases."""

    model_config = ConfigDict(extra="ignore")

    name: str
    generation: int | None = None
    uid: str | None = None
    labels: StringMap | None = None
    annotations: StringMap | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _checked_labels(value)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        problem = metadata_annotations_problem(value or {})
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_dns1123_subdomain(value):
            raise ValueError(
                f"{value!r} is not a valid name: lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit, at most 253 characters "
                "(it becomes the RuntimeClass name)"
            )
        return value


class WindowsRuntimeProfile(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.spec.handler) || (size(self.metadata.name) <= 63 && "
                    f"self.metadata.name.matches('{DNS1123_LABEL_PATTERN}'))",
                    "metadata.name is not a valid handler name (DNS-1123 label, at most 63 "
                    "characters, no dots): set spec.handler",
                )
            ]
        }
    )

    api_version: Literal["runtime.wcow.dev/v1alpha1"] = API_VERSION
    kind: Literal["WindowsRuntimeProfile"] = KIND
    metadata: ObjectMeta
    spec: WindowsRuntimeProfileSpec
    status: WindowsRuntimeProfileStatus | None = None

    @model_validator(mode="after")
    def _handler_name(self) -> Self:
        if self.spec.handler is None and not is_dns1123_label(self.metadata.name):
            raise FieldError(
                "spec.handler",
                f"is needed because metadata.name {self.metadata.name!r} is not a valid "
                "containerd handler (DNS-1123 label: at most 63 characters, no dots)",
            )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def handler(self) -> str:
        return self.spec.handler or self.metadata.name
