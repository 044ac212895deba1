"""What the admission webhook decides about a pod: admitted (a copy, perhaps changed, perhaps
with warnings for the client) or refused with a reason code, which is also the metric's
label (``webhook.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

# Why a pod was refused; also the metric label.
VM_TOO_LARGE: Final = "VMTooLarge"

VM_TOO_SMALL: Final = "VMTooSmall"

ANNOTATION_OUT_OF_BOUNDS: Final = "AnnotationOutOfBounds"

ANNOTATION_INVALID: Final = "AnnotationInvalid"

ANNOTATION_NOT_ALLOWED: Final = "AnnotationNotAllowed"

ANNOTATION_CHANGED: Final = "AnnotationChanged"

HOST_PROCESS_HYPERV: Final = "HostProcessWithHyperV"

WINDOWS_BUILD_MISMATCH: Final = "WindowsBuildMismatch"

INVALID_QUANTITY: Final = "InvalidQuantity"

MALFORMED_POD: Final = "MalformedPod"

POD_TOO_LARGE: Final = "PodTooLarge"
# A pod with pod-level spec.resources: never runs on Windows (the kubelet's own reason).
POD_LEVEL_RESOURCES: Final = "PodLevelResourcesNotSupported"

REASONS: Final = (
    VM_TOO_LARGE,
    VM_TOO_SMALL,
    ANNOTATION_OUT_OF_BOUNDS,
    ANNOTATION_INVALID,
    ANNOTATION_NOT_ALLOWED,
    ANNOTATION_CHANGED,
    HOST_PROCESS_HYPERV,
    WINDOWS_BUILD_MISMATCH,
    INVALID_QUANTITY,
    MALFORMED_POD,
    POD_TOO_LARGE,
    POD_LEVEL_RESOURCES,
)

# Refusal reasons of the webhook itself, not of the decision.
NOT_READY: Final = "OperatorNotReady"
TIMED_OUT: Final = "DecisionTimeout"


@dataclass(frozen=True)
class AdmissionWarning:
    """A warning the API server passes to the client (kubectl prints it) with the pod."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclass(frozen=True)
class Admitted:
    """The pod as admitted; ``changes`` says what was changed (empty: unchanged)."""

    pod: dict[str, Any]
    changes: tuple[str, ...] = ()
    profile: str | None = None
    warnings: tuple[AdmissionWarning, ...] = ()

    @property
    def mutated(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Refused:
    reason: str
    message: str
    profile: str


Decision = Admitted | Refused


class Refusal(Exception):  # noqa: N818 - control flow inside admit(), never escapes it
    """Raised deep in the walk; admit() turns it into a Refused for the pod's profile."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
