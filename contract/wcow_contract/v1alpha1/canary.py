"""spec.canary: how node agents prove the handler works before a node is labelled ready,
and the image reference grammar its image is checked by."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, Field, WithJsonSchema

from wcow_contract.v1alpha1.fields import Model

# An image reference as containerd parses it (distribution/reference's grammar: optional
# registry host and port, lowercase path components, optional tag and sha256 digest).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
IMAGE_REFERENCE_PATTERN: Final = (
    rf"^(?:(?:{_HOST}(?:\.{_HOST})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_IMAGE_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
IMAGE_REFERENCE_MAX = 512


def _image_reference(value: str) -> str:
    if len(value) > IMAGE_REFERENCE_MAX or not _IMAGE_REFERENCE.fullmatch(value):
        raise ValueError(
            "is not an image reference: [registry[:port]/]path[:tag][@sha256:"
            f"<64 hex>] with lowercase path components, at most {IMAGE_REFERENCE_MAX} characters"
        )
    return value


ImageReference = Annotated[
    str,
    AfterValidator(_image_reference),
    WithJsonSchema(
        {"type": "string", "maxLength": IMAGE_REFERENCE_MAX, "pattern": IMAGE_REFERENCE_PATTERN}
    ),
]


class CanarySpec(Model):
    enabled: bool = True
    """Start a test sandbox with the handler on each node before labelling it ready."""
    timeout_seconds: Annotated[int, Field(ge=10, le=1800)] = 180
    """How long one canary may take (pulling the sandbox image included)."""
    image: ImageReference | None = None
    """Image the canary pulls through CRI as the kubelet does and runs in its sandbox under
    the handler (proving that the class's images run, and reading the VM's processor count
    inside); a pull or start that fails leaves the handler Failed. Omitted: the agent's
    image for the guest build (chart agent.canaryImages), else the sandbox alone is checked.
    Every node's agent pulls it and runs it as the image's ContainerUser (no HostProcess, no
    mounts), outside Kubernetes admission: name an image you trust, ideally by digest."""
