"""``admit`` and then the images: the decision that combines sizing and images, with the
images read through the registries (``registry.resolver``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.registry.resolver import Resolver
from wcow_operator.webhook.decide import admit, admit_update
from wcow_operator.webhook.decision import Admitted, Decision
from wcow_operator.webhook.image_decision import (
    changed_images,
    only_containers,
    references,
    with_images,
    with_updated_images,
)


@dataclass
class ImageAdmission:
    """``admit`` and then the images: what the webhook runs when image checks are on, and
    ``wcow admit --resolve-images``. ``unchecked`` is told the cause of each image admitted
    unread (the webhook counts them)."""

    resolver: Resolver
    refuse_unresolved: bool = False  # the operator's --unreachable-registry Refuse
    unchecked: Callable[[str], None] = lambda cause: None

    def admit(
        self,
        pod: Mapping[str, Any],
        profiles: Mapping[str, WindowsRuntimeProfile],
        dry_run: bool = False,
    ) -> Decision:
        """``dry_run``: a server-side dry run, answered from the cache (never waiting on a
        registry) and never refused for an image it did not read (nothing runs)."""
        decision = admit(pod, profiles)
        profile = profiles.get(decision.profile) if decision.profile else None
        if profile is None or not isinstance(decision, Admitted):
            return decision
        facts = self.resolver.resolve(references(pod), namespace_of(pod), dry_run=dry_run)
        refuse = self._refuse(profile) and not dry_run
        final, causes = with_images(decision, profile, facts, refuse)
        for cause in causes:
            self.unchecked(cause)
        return final

    def admit_update(
        self,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        profiles: Mapping[str, WindowsRuntimeProfile],
        dry_run: bool = False,
    ) -> Decision:
        """``admit_update``, and the images an UPDATE changes (ephemeral containers added
        included) judged as at creation."""
        decision = admit_update(old, new, profiles)
        profile = profiles.get(decision.profile) if decision.profile else None
        names = changed_images(old, new)
        if profile is None or not isinstance(decision, Admitted) or not names:
            return decision
        changed = only_containers(new, names)
        facts = self.resolver.resolve(references(changed), namespace_of(new), dry_run=dry_run)
        refuse = self._refuse(profile) and not dry_run
        final, causes = with_updated_images(decision, profile, changed, facts, refuse)
        for cause in causes:
            self.unchecked(cause)
        return final

    def _refuse(self, profile: WindowsRuntimeProfile) -> bool:
        return self.refuse_unresolved or profile.spec.images.unreachable_registry == "Refuse"


def namespace_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's namespace (the API server sets the request's namespace on the object before
    admission), the tenant whose budgets and credentials its lookups use."""
    metadata = pod.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None
