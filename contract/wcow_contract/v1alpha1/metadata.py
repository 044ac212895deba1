"""The parts of an object's metadata the profile model reads, checked as the API server
checks them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, field_validator

from wcow_contract.v1alpha1.fields import Model, checked_labels
from wcow_contract.validation import is_dns1123_subdomain, metadata_annotations_problem


def _null_strings_empty(value: Any) -> Any:
    # ObjectMeta is a Go struct on the server: a null label or annotation value decodes as "".
    if isinstance(value, dict):
        return {key: "" if item is None else item for key, item in value.items()}
    return value


StringMap = Annotated[dict[str, str], BeforeValidator(_null_strings_empty)]


class ObjectMeta(Model):
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
        return checked_labels(value)

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
