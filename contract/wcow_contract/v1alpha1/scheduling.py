"""spec.scheduling: the node labels and tolerations the RuntimeClass adds to its pods."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from wcow_contract.labels import OS_LABEL, READY_LABEL_PREFIX
from wcow_contract.v1alpha1.fields import (
    MAX_LIST,
    FieldError,
    Int64,
    LabelValue,
    Model,
    check_label_key,
    check_label_value,
    without_nulls,
)
from wcow_contract.v1alpha1.rules import NODE_SELECTOR_RULES, SHORT_LABEL_PREFIX, TOLERATION_RULES
from wcow_contract.validation import (
    QUALIFIED_NAME_PATTERN,
    label_value_problem,
    qualified_name_problem,
)


class Toleration(Model):
    """A toleration added to pods of this RuntimeClass (core/v1 Toleration)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": TOLERATION_RULES})

    key: (
        Annotated[
            str,
            StringConstraints(max_length=316),
            WithJsonSchema(
                {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": f"^({QUALIFIED_NAME_PATTERN[1:-1]})?$",  # or empty
                    "x-kubernetes-validations": [SHORT_LABEL_PREFIX],
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


class SchedulingSpec(Model):
    node_selector: (
        Annotated[
            dict[str, LabelValue],
            Field(
                max_length=MAX_LIST,
                json_schema_extra={"x-kubernetes-validations": NODE_SELECTOR_RULES},
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
            check_label_key(key)
            if key.startswith(READY_LABEL_PREFIX):
                raise FieldError(
                    f"[{key}]",
                    f"labels under {READY_LABEL_PREFIX} are managed by wcow-runtime; use "
                    "requireReadyLabel instead",
                )
            if key == OS_LABEL and label != "windows":
                raise FieldError(f"[{key}]", f"must be 'windows' (or omitted), not {label!r}")
            check_label_value(key, label)
        return value
