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
        self, pod: Mapping[str, Any], profiles: Mapping[str, WindowsRuntimeProfile]
    ) -> Decision:
        decision = admit(pod, profiles)
        profile = profiles.get(decision.profile) if decision.profile else None
        if profile is None or not isinstance(decision, Admitted):
            return decision
        facts = self.resolver.resolve(references(pod))
        final, causes = with_images(decision, profile, facts, self._refuse(profile))
        for cause in causes:
            self.unchecked(cause)
        return final

    def admit_update(
        self,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        profiles: Mapping[str, WindowsRuntimeProfile],
    ) -> Decision:
        """``admit_update``, and the images an UPDATE changes judged as at creation."""
        decision = admit_update(old, new, profiles)
        profile = profiles.get(decision.profile) if decision.profile else None
        names = changed_images(old, new)
        if profile is None or not isinstance(decision, Admitted) or not names:
            return decision
        changed = only_containers(new, names)
        facts = self.resolver.resolve(references(changed))
        final, causes = with_updated_images(
            decision, profile, changed, facts, self._refuse(profile)
        )
        for cause in causes:
            self.unchecked(cause)
        return final

    def _refuse(self, profile: WindowsRuntimeProfile) -> bool:
        return self.refuse_unresolved or profile.spec.images.unreachable_registry == "Refuse"
