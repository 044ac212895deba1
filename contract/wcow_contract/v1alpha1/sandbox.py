"""spec.sandbox: the pod sandbox's platform (``sandbox.image`` was removed, and is refused
with the reason)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, field_validator, model_validator

from wcow_contract.v1alpha1.defaults import DEFAULT_PLATFORM
from wcow_contract.v1alpha1.fields import FieldError, Model
from wcow_contract.v1alpha1.rules import ARM64_REFUSED, SANDBOX_IMAGE_REMOVED
from wcow_contract.v1alpha1.schema import sandbox_schema


class SandboxSpec(Model):
    model_config = ConfigDict(json_schema_extra=sandbox_schema)

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
