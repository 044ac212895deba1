"""spec.images: what the admission webhook does with the images of the class's pods."""

from __future__ import annotations

from typing import Literal

from wcow_contract.v1alpha1.fields import Model

UnreachableRegistry = Literal["Admit", "Refuse"]


class ImagesSpec(Model):
    """What the admission webhook does with the images of this class's pods when it reads
    them from their registries (operator flag --resolve-images; off by default)."""

    unreachable_registry: UnreachableRegistry | None = None
    """When an image cannot be read (registry down or slow, 401, 404, 5xx, a manifest too
    large or malformed): Admit lets the pod through with an admission warning and counts it
    in wcow_admission_images_unchecked_total; Refuse refuses it (reason ImageUnresolved).
    Default: the operator's --unreachable-registry (Admit unless set). Refuse wins if either
    asks for it."""
