"""Which of the plan's handlers this host can run, and why not for the others."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wcow_operator.api.windows_builds import (
    WindowsBuild,
    hyperv_can_run,
    parse_windows_build,
    process_can_run,
)


@dataclass(frozen=True)
class Host:
    build: WindowsBuild
    hyperv_available: bool


@dataclass(frozen=True)
class Refusal:
    """Why a host cannot run a handler: a CamelCase reason and a sentence."""

    reason: str
    message: str


def refusal(entry: Mapping[str, Any], host: Host) -> Refusal | None:
    """Why ``host`` cannot run this plan entry, or None when it can."""
    guest = parse_windows_build(entry["windowsBuild"]) if entry.get("windowsBuild") else None
    if entry["isolation"] == "HyperV":
        if not host.hyperv_available:
            return Refusal(
                "HyperVUnavailable",
                "Hyper-V is not available on this host (role not installed, or no nested "
                "virtualization)",
            )
        if guest is not None and not hyperv_can_run(host.build, guest):
            return Refusal(
                "HostBuildTooOld",
                f"guest build {guest.label_value} is newer than the host's "
                f"{host.build.label_value}; Hyper-V isolation needs host build >= guest build",
            )
        return None
    if guest is not None and not process_can_run(host.build, guest):
        return Refusal(
            "ProcessBuildMismatch",
            f"process isolation cannot run build {guest.label_value} images on a "
            f"{host.build.label_value} host (builds must match, or from 10.0.20348 on, the "
            "guest must be between 10.0.20348 and the host build)",
        )
    return None


def classify_handlers(
    handlers: Mapping[str, Mapping[str, Any]], host: Host
) -> tuple[dict[str, Mapping[str, Any]], dict[str, Refusal]]:
    """(eligible handler -> entry, ineligible handler -> refusal)."""
    eligible: dict[str, Mapping[str, Any]] = {}
    refused: dict[str, Refusal] = {}
    for handler in sorted(handlers):
        found = refusal(handlers[handler], host)
        if found is None:
            eligible[handler] = handlers[handler]
        else:
            refused[handler] = found
    return eligible, refused
