"""Pods and profiles for the admission tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import profile_document
from wcow_contract.errors import parse_profile
from wcow_contract.v1alpha1 import WindowsRuntimeProfile

FROM_LIMITS = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}


def profile(name: str = "hv", **spec: Any) -> WindowsRuntimeProfile:
    return parse_profile(profile_document(name, **spec))


def profiles(*items: WindowsRuntimeProfile) -> dict[str, WindowsRuntimeProfile]:
    return {item.name: item for item in items}


def container(name: str = "app", **resources: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}
    if resources:
        body["resources"] = copy.deepcopy(resources)
    return body


def pod(
    runtime_class: str | None = "hv",
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers or [container()], **spec}
    if runtime_class is not None:
        body["runtimeClassName"] = runtime_class
    if init:
        body["initContainers"] = init
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def write_documents(path: Path, *documents: Any) -> Path:
    """A multi-document YAML file of ``documents``."""
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return path
