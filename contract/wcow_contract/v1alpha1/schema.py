"""Hooks that shape the generated schema where a field's type alone cannot: a removed field
declared so that the API server refuses it with the reason, and the runhcs options a profile
may set, each typed and described, with the server-side twins of their checks."""

from __future__ import annotations

from pydantic.config import JsonDict

from wcow_contract.catalog import runhcs_options
from wcow_contract.v1alpha1.fields import MAX_STRING
from wcow_contract.v1alpha1.rules import (
    DEFAULT_ANNOTATIONS_RULE,
    SANDBOX_IMAGE_WHY,
    SANDBOX_RULES,
)


def sandbox_schema(schema: JsonDict) -> None:
    # Declared only so the API server refuses it with the reason instead of pruning it quietly.
    properties = schema.setdefault("properties", {})
    assert isinstance(properties, dict)
    properties["image"] = {
        "type": "string",
        "maxLength": MAX_STRING,
        "description": f"Removed, and refused when set: {SANDBOX_IMAGE_WHY}.",
    }
    schema["x-kubernetes-validations"] = list(SANDBOX_RULES)


# The runhcs options a profile may set through spec.containerd.options (those without a
# refusal in runhcs_options), each described for the CRD. The CRD declares them with their
# types, so the API server refuses the others as unknown fields (kubectl's strict field
# validation) or drops them, as it does for every misspelt field; the model refuses them,
# saying what to write instead.
OPTION_DESCRIPTIONS = {
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
# Server-side twins of the option checks in runhcs_options, so the API server refuses what
# the model refuses.
_OPTION_TWINS: dict[str, JsonDict] = {
    "NCProxyAddr": {"pattern": runhcs_options.NCPROXY_PIPE_PATTERN},
    "DefaultContainerAnnotations": {
        "maxProperties": runhcs_options.MAX_DEFAULT_ANNOTATIONS,
        "x-kubernetes-validations": [DEFAULT_ANNOTATIONS_RULE],
    },
}


def options_schema() -> JsonDict:
    allowed = sorted(
        name for name, spec in runhcs_options.RUNHCS_OPTIONS.items() if spec.refusal is None
    )
    assert allowed == sorted(OPTION_DESCRIPTIONS), "describe every option a profile may set"
    properties: JsonDict = {
        name: {
            **_OPTION_TYPES[runhcs_options.RUNHCS_OPTIONS[name].kind],
            "description": OPTION_DESCRIPTIONS[name],
            **_OPTION_TWINS.get(name, {}),
        }
        for name in allowed
    }
    return {"type": "object", "properties": properties}
