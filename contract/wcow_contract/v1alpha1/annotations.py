"""spec.annotations: which pod and container annotations containerd passes to the shim,
as glob patterns that some Kubernetes annotation key can match."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema

from wcow_contract.catalog.annotation_patterns import pattern_problem
from wcow_contract.v1alpha1.fields import MAX_LIST, MAX_STRING, FreeText, Model
from wcow_contract.v1alpha1.rules import ANNOTATIONS_RULES, PLAIN_GLOB_RULE


def _annotation_pattern(pattern: str) -> str:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise ValueError(problem)
    return pattern


AnnotationPattern = Annotated[
    FreeText,
    AfterValidator(_annotation_pattern),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_STRING,
            "x-kubernetes-validations": [PLAIN_GLOB_RULE],
        }
    ),
]


class AnnotationsSpec(Model):
    """Which pod and container annotations containerd passes to the shim (glob patterns,
    Go path.Match syntax). Omitted: containerd's Windows defaults for the isolation.
    A pattern no Kubernetes annotation key can match (more than one '/', a prefix that is
    not a DNS subdomain, a name that is not 1-63 letters, digits, '-', '_' or '.') or a
    malformed glob (containerd ignores its error and matches nothing) is refused."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": ANNOTATIONS_RULES})

    pod: Annotated[list[AnnotationPattern], Field(max_length=MAX_LIST)] | None = None
    """Pod annotations allowed through (pod_annotations). Default: io.microsoft.virtualmachine.*
    for HyperV, none for Process. [] allows none."""
    container: Annotated[list[AnnotationPattern], Field(max_length=MAX_LIST)] | None = None
    """Container annotations allowed through (container_annotations). Default:
    io.microsoft.container.*. [] allows none."""
