"""What every part of the profile is built from: the base model (as strict as the CRD's
schema), the error that blames one field, the bounds, and the field types and label checks
several parts share."""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from wcow_contract.quantity import MAX_QUANTITY_TEXT, QUANTITY_PATTERN, parse_quantity
from wcow_contract.v1alpha1.rules import QUANTITY_RULES
from wcow_contract.validation import (
    DNS1123_LABEL_MAX,
    LABEL_VALUE_PATTERN,
    label_value_problem,
    qualified_name_problem,
)

MAX_STRING = 1024  # generous bound on free text; keeps CEL cost estimates finite
MAX_LIST = 64
# The API server decodes a JSON integer into int64; a larger one becomes a float, which an
# integer field refuses.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

FreeText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_STRING)]
Int64 = Annotated[
    int, Field(ge=INT64_MIN, le=INT64_MAX), WithJsonSchema({"type": "integer", "format": "int64"})
]


class FieldError(ValueError):
    """A rule that spans fields, blamed on the one field a person should change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Model(BaseModel):
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
            "x-kubernetes-validations": QUANTITY_RULES,
        }
    ),
]

LabelValue = Annotated[
    str,
    StringConstraints(max_length=DNS1123_LABEL_MAX),
    WithJsonSchema(
        {"type": "string", "maxLength": DNS1123_LABEL_MAX, "pattern": LABEL_VALUE_PATTERN}
    ),
]


def check_label_key(key: str) -> None:
    problem = qualified_name_problem(key)
    if problem:
        raise FieldError(f"[{key}]", f"invalid label key: {problem}")


def check_label_value(key: str, label: str) -> None:
    problem = label_value_problem(label)
    if problem:
        raise FieldError(f"[{key}]", f"{label!r:.80}: {problem}")


def checked_labels(value: dict[str, str] | None) -> dict[str, str] | None:
    for key, label in (value or {}).items():
        check_label_key(key)
        check_label_value(key, label)
    return value
