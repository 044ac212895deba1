"""A label selector (meta/v1 LabelSelector), as spec.rollout.evictPodSelector uses it."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from wcow_contract.v1alpha1.fields import (
    MAX_LIST,
    FieldError,
    LabelValue,
    Model,
    check_label_key,
    checked_labels,
    without_nulls,
)
from wcow_contract.v1alpha1.rules import (
    LABEL_SELECTOR_REQUIREMENT_RULES,
    MATCH_LABELS_RULES,
    SHORT_LABEL_PREFIX,
)
from wcow_contract.validation import QUALIFIED_NAME_PATTERN


class LabelSelectorRequirement(Model):
    """One requirement of a label selector (meta/v1 LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": LABEL_SELECTOR_REQUIREMENT_RULES}
    )

    key: Annotated[
        str,
        StringConstraints(min_length=1, max_length=316),
        WithJsonSchema(
            {
                "type": "string",
                "maxLength": 316,
                "pattern": QUALIFIED_NAME_PATTERN,
                "x-kubernetes-validations": [SHORT_LABEL_PREFIX],
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
        check_label_key(value)
        return value

    @model_validator(mode="after")
    def _values(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise FieldError(".values", f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise FieldError(".values", f"operator {self.operator} takes no values")
        return self


class LabelSelector(Model):
    """A label selector (meta/v1 LabelSelector): every requirement must hold; empty selects
    every pod."""

    match_labels: (
        Annotated[
            dict[str, LabelValue],
            Field(
                max_length=MAX_LIST,
                json_schema_extra={"x-kubernetes-validations": MATCH_LABELS_RULES},
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
        return checked_labels(value)
