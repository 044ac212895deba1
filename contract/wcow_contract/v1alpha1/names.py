"""The API's names: group, version, kind and resource (the CRD's ``spec.names``)."""

from __future__ import annotations

from typing import Final

GROUP = "runtime.wcow.dev"
VERSION = "v1alpha1"
API_VERSION: Final = "runtime.wcow.dev/v1alpha1"
KIND: Final = "WindowsRuntimeProfile"
PLURAL = "windowsruntimeprofiles"
SINGULAR = "windowsruntimeprofile"
SHORT_NAMES = ("wrp",)
