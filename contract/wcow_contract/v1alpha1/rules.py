"""The CEL rules of the CRD (``x-kubernetes-validations``): what the API server refuses
before a profile is stored, each the twin of a check of the model (pydantic, for ``wcow
render`` and the operator), with the same words where both can say them.

Each list is attached to its model or field where that is declared; the order of a list is
the order in the generated CRD.
"""

from __future__ import annotations

from pydantic.config import JsonDict, JsonValue

from wcow_contract.catalog.annotation_patterns import (
    NAME_MAX,
    PLAIN_GLOB_NAME_TOO_LONG,
    PLAIN_GLOB_PATTERN,
    PLAIN_GLOB_PREFIX_TOO_LONG,
    PREFIX_MAX,
)
from wcow_contract.catalog.hcs_annotations import (
    HOST_PROCESS_PREFIX,
    UVM_DEFAULT_MEMORY_MB,
    UVM_DEFAULT_PROCESSORS,
    refused_default_keys,
)
from wcow_contract.catalog.windows_builds import BUILD_ALIASES, WINDOWS_BUILD_LABEL
from wcow_contract.labels import ARCH_LABEL, OS_LABEL, READY_LABEL_PREFIX
from wcow_contract.v1alpha1.defaults import DEFAULT_PLATFORM
from wcow_contract.validation import (
    DNS1123_LABEL_PATTERN,
    DNS1123_SUBDOMAIN_MAX,
    QUALIFIED_NAME_LONG_PREFIX,
    QUALIFIED_NAME_PATTERN,
)

# A model's or a field's x-kubernetes-validations (a list of cel() entries).
Rules = list[JsonValue]


def cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """A CEL x-kubernetes-validations entry for the generated CRD."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


# -- values ---------------------------------------------------------------------------------

# The pattern of a quantity applies to strings only; an integer is checked here (and a number
# such as 1.0 fails here, as the model refuses it).
QUANTITY_RULES: Rules = [cel("type(self) == string || self >= 0", "must not be negative")]

# Label keys and values as the API server can check them (the model checks them with
# qualified_name_problem and label_value_problem, whose messages say more).
SHORT_LABEL_PREFIX = cel(
    f"!self.matches('{QUALIFIED_NAME_LONG_PREFIX}')",
    f"the prefix of a label key (before '/') is at most {DNS1123_SUBDOMAIN_MAX} characters",
)

# pattern_problem on the API server: exact for globs with no '[' and no '\\' (see
# annotation_patterns.PLAIN_GLOB_PATTERN); others are the operator's to judge.
PLAIN_GLOB_RULE = cel(
    "self.contains('[') || self.contains('\\\\') || "
    f"(self.matches('{PLAIN_GLOB_PATTERN}') && !self.matches('{PLAIN_GLOB_NAME_TOO_LONG}') "
    f"&& !self.matches('{PLAIN_GLOB_PREFIX_TOO_LONG}'))",
    "the pattern can match no annotation key: keys are [prefix/]name, the prefix a DNS "
    f"subdomain of at most {PREFIX_MAX} characters, the name 1-{NAME_MAX} letters, digits, "
    "'-', '_' or '.', starting and ending with a letter or digit ('*' and '?' stand for any)",
)

MAX_UNAVAILABLE_PATTERN = r"^(100|[1-9][0-9]?)%$"
MAX_UNAVAILABLE_RULES: Rules = [
    cel(
        f"type(self) == int ? self >= 1 : self.matches('{MAX_UNAVAILABLE_PATTERN}')",
        "maxUnavailable must be a count (at least 1) or a percentage from 1% to 100%",
    )
]

# -- spec.sandbox ---------------------------------------------------------------------------

# spec.sandbox.image was removed: it rendered the runhcs option SandboxImage, which no
# hcsshim reads and no containerd uses (the pause image is node-wide).
SANDBOX_IMAGE_WHY = (
    "it set the runhcs option SandboxImage, which no hcsshim reads and no "
    "containerd uses, so it never chose the pause image. The pause (sandbox) image is one per "
    "node: set sandbox_image in the CRI plugin of config.toml on containerd 1.x, or "
    "pinned_images.sandbox in the io.containerd.cri.v1.images plugin on containerd 2.x, and "
    "delete spec.sandbox.image"
)
SANDBOX_IMAGE_REMOVED = f"was removed: {SANDBOX_IMAGE_WHY}"
ARM64_REFUSED = (
    "is not supported: the wcow-runtime node agent runs only on amd64 nodes (its DaemonSet "
    "selects kubernetes.io/arch=amd64), so no node would ever prove a windows/arm64 handler "
    "ready; use windows/amd64"
)
SANDBOX_RULES: Rules = [
    cel("!has(self.image)", f"spec.sandbox.image {SANDBOX_IMAGE_REMOVED}", ".image"),
    # The server applies no defaults: a sandbox without platform is windows/amd64.
    cel(
        "!has(self.platform) || self.platform == 'windows/amd64'",
        f"{ARM64_REFUSED}",
        ".platform",
    ),
]

# -- spec.vm --------------------------------------------------------------------------------

VM_RULES: Rules = [
    cel(
        "!has(self.memoryMB) || self.memoryMB % 2 == 0",
        "memoryMB must be even: hcsshim rounds utility VM memory up to 2 MB",
        ".memoryMB",
    ),
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
]

# -- spec.overhead --------------------------------------------------------------------------

OVERHEAD_RULES: Rules = [
    cel("!(has(self.podFixed) && has(self.policy))", "set either podFixed or policy, not both")
]

# -- spec.scheduling ------------------------------------------------------------------------

TOLERATION_RULES: Rules = [
    cel(
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "value must be empty when operator is Exists",
    ),
    cel(
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "tolerationSeconds is only allowed with effect NoExecute",
    ),
    cel(
        "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "an empty key needs operator Exists (tolerate all)",
        ".operator",
    ),
]


def _node_selector_rules() -> Rules:
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


NODE_SELECTOR_RULES = _node_selector_rules()

# -- spec.annotations -----------------------------------------------------------------------

# The part of pattern_problem the API server can check cheaply: at most one '/'.
_ONE_SLASH = "!{0}.exists(p, p.matches('/.*/'))"
_ONE_SLASH_MESSAGE = (
    "a pattern has more than one '/': annotation keys are [prefix/]name, so it can never match"
)
ANNOTATIONS_RULES: Rules = [
    cel(f"!has(self.{field}) || {_ONE_SLASH.format('self.' + field)}",
        _ONE_SLASH_MESSAGE, f".{field}")
    for field in ("pod", "container")
]  # fmt: skip

# -- spec.containerd ------------------------------------------------------------------------


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


DEFAULT_ANNOTATIONS_RULE = _default_annotations_rule()

# -- spec.rollout ---------------------------------------------------------------------------

LABEL_SELECTOR_REQUIREMENT_RULES: Rules = [
    cel(
        "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
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
MATCH_LABELS_RULES: Rules = [
    cel(
        f"self.all(k, k.matches('{QUALIFIED_NAME_PATTERN}') && "
        f"!k.matches('{QUALIFIED_NAME_LONG_PREFIX}'))",
        "label keys are [prefix/]name: a DNS subdomain prefix of at most "
        f"{DNS1123_SUBDOMAIN_MAX} characters, a name of at most 63",
    )
]

# -- spec -----------------------------------------------------------------------------------


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


SPEC_RULES: Rules = [
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
    _build_pin_rule(),
]

# -- the object -----------------------------------------------------------------------------

PROFILE_RULES: Rules = [
    cel(
        "has(self.spec.handler) || (size(self.metadata.name) <= 63 && "
        f"self.metadata.name.matches('{DNS1123_LABEL_PATTERN}'))",
        "metadata.name is not a valid handler name (DNS-1123 label, at most 63 "
        "characters, no dots): set spec.handler",
    )
]
