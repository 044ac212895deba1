"""WindowsRuntimeProfile: the object, its metadata, spec and status."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import ConfigDict, model_validator

from wcow_contract.v1alpha1.fields import FieldError, Model
from wcow_contract.v1alpha1.metadata import ObjectMeta
from wcow_contract.v1alpha1.names import API_VERSION, KIND
from wcow_contract.v1alpha1.rules import PROFILE_RULES
from wcow_contract.v1alpha1.spec import WindowsRuntimeProfileSpec
from wcow_contract.v1alpha1.status import WindowsRuntimeProfileStatus
from wcow_contract.validation import is_dns1123_label


class WindowsRuntimeProfile(Model):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": PROFILE_RULES})

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
