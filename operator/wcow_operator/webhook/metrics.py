"""The admission webhook's metrics: pods admitted, changed, refused (by reason) and warned
about, and images admitted unread."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from wcow_operator.webhook.decision import NOT_READY, REASONS, TIMED_OUT, VM_TOO_SMALL
from wcow_operator.webhook.image_decision import REASONS as IMAGE_REASONS


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.admitted = Counter(
            "wcow_admission_admitted_total",
            "Pods of wcow RuntimeClasses admitted (changed or not), dry runs included",
            registry=registry,
        )
        self.mutated = Counter(
            "wcow_admission_mutated_total",
            "Pods admitted with changes (VM sizing annotations, memory requests)",
            registry=registry,
        )
        self.refused = Counter(
            "wcow_admission_refused_total",
            "Pods refused, by reason",
            ["reason"],
            registry=registry,
        )
        for reason in (*REASONS, *IMAGE_REASONS, NOT_READY, TIMED_OUT):
            self.refused.labels(reason=reason)
        self.images_unchecked = Counter(
            "wcow_admission_images_unchecked_total",
            "Images admitted without their build checked (--resolve-images), by cause: "
            "Unreachable, Timeout, Unauthorized, NotFound, ServerError, TooLarge, Malformed",
            ["cause"],
            registry=registry,
        )
        self.warned = Counter(
            "wcow_admission_warned_total",
            "Pods admitted with an admission warning, by reason (VMTooSmall under "
            "spec.vm.oversizedPods: Warn; ImageUnchecked: an image not read, --resolve-images)",
            ["reason"],
            registry=registry,
        )
        self.warned.labels(reason=VM_TOO_SMALL)
