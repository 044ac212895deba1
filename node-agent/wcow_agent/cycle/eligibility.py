"""Which of the plan's handlers this host can run, and why not for the others."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wcow_agent.config.containerd_lines import first_line_honouring, line_for, unsupported
from wcow_contract.catalog.windows_builds import (
    WindowsBuild,
    isolation_refusal,
    parse_windows_build,
)
from wcow_contract.wire.plan import PlanEntry


@dataclass(frozen=True)
class Host:
    build: WindowsBuild
    hyperv_available: bool
    containerd_version: str | None = None
    """None: not known (offline merge without ``--containerd-version``): not judged."""


@dataclass(frozen=True)
class Refusal:
    """Why a host cannot run a handler: a CamelCase reason and a sentence."""

    reason: str
    message: str


def refusal(entry: PlanEntry, host: Host) -> Refusal | None:
    """Why ``host`` cannot run this plan entry, or None when it can."""
    found = _isolation_refusal(entry, host)
    if found is None and host.containerd_version is not None:
        found = containerd_refusal(entry, host.containerd_version)
    return found


def containerd_refusal(entry: PlanEntry, version: str) -> Refusal | None:
    """Why containerd ``version`` cannot honour this entry's table: it would drop part of it
    silently (``containerd_lines``), so the handler would run without what it promises."""
    table = entry.runtime
    dropped = unsupported(table, version)
    if not dropped:
        return None
    line = line_for(version)
    needed = first_line_honouring(table)
    upgrade = (
        f"upgrade containerd to {needed.name} or later, or drop those settings"
        if needed is not None
        else "no containerd line honours them: drop those settings"
    )
    return Refusal(
        "ContainerdTooOld",
        f"containerd {version} (hcsshim {line.hcsshim}) would silently drop "
        f"{'; '.join(dropped)}; {upgrade}",
    )


def _isolation_refusal(entry: PlanEntry, host: Host) -> Refusal | None:
    guest = parse_windows_build(entry.windows_build) if entry.windows_build else None
    found = isolation_refusal(entry.isolation, guest, host.build, host.hyperv_available)
    return Refusal(*found) if found else None


def classify_handlers(
    handlers: Mapping[str, PlanEntry], host: Host
) -> tuple[dict[str, PlanEntry], dict[str, Refusal]]:
    """(eligible handler -> entry, ineligible handler -> refusal)."""
    eligible: dict[str, PlanEntry] = {}
    refused: dict[str, Refusal] = {}
    for handler in sorted(handlers):
        found = refusal(handlers[handler], host)
        if found is None:
            eligible[handler] = handlers[handler]
        else:
            refused[handler] = found
    return eligible, refused
