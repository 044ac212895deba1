"""Which of the plan's handlers this host can run, and why not for the others."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from wcow_agent.config.containerd_lines import (
    first_line_honouring,
    line_for,
    unsupported,
    version_tuple,
)
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
    hyperv_why: str | None = None
    """The ``HyperVUnavailable`` message where the platform says why (AKS, GKE, EKS:
    ``layouts/hyperv_platforms.py``); None: the generic one."""
    effective: Mapping[str, Any] | None = None
    """The configuration containerd runs with (``containerd config dump``, imports merged),
    for the snapshotter each handler unpacks with; None: not known, not judged."""


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


def _refusal_of(handler: str, entry: PlanEntry, host: Host) -> Refusal | None:
    found = refusal(entry, host)
    if found is None:
        found = block_cim_refusal(handler, entry, host)
    return found


BLOCK_CIM: Final = "blockcim"
BLOCK_CIM_SHIM_FROM: Final = (2, 3)
"""containerd 2.3.0 is the first to ship hcsshim v0.15.0-rc.1 (``script/setup/runhcs-version``),
whose shim refuses Hyper-V isolation on block CIM layers (commit e9cde9e93)."""


def block_cim_relevant(entries: Iterable[PlanEntry], containerd_version: str | None) -> bool:
    """Whether the block CIM check can refuse anything here (so the configuration is worth
    reading): a Hyper-V handler, on containerd 2.3 or later."""
    try:
        new_enough = (
            containerd_version is not None
            and version_tuple(containerd_version) >= BLOCK_CIM_SHIM_FROM
        )
    except ValueError:
        return False
    return new_enough and any(entry.isolation == "HyperV" for entry in entries)


def block_cim_refusal(handler: str, entry: PlanEntry, host: Host) -> Refusal | None:
    """A Hyper-V handler whose images containerd unpacks with the ``blockcim`` snapshotter
    cannot start a pod on containerd 2.3 or later: the runhcs shim there (hcsshim
    v0.15.0-rc.1 and later, ``cmd/containerd-shim-runhcs-v1/pod.go``) refuses Hyper-V
    isolation on block CIM layers unless the pod carries a confidential security policy,
    which no profile sets. The snapshotter is the effective one: the handler's own
    ``snapshotter`` (the plan's table, else the configuration containerd runs), else the CRI
    images plugin's; never the mere presence of the blockcim plugin's table, which every
    2.2+ default configuration has. On 2.2 (hcsshim v0.14) the canary decides."""
    if host.effective is None or not block_cim_relevant([entry], host.containerd_version):
        return None
    snapshotter, where = effective_snapshotter(handler, entry.runtime, host.effective)
    if snapshotter != BLOCK_CIM:
        return None
    return Refusal(
        "HyperVOnBlockCim",
        f"containerd {host.containerd_version} unpacks this handler's images with the "
        f"blockcim snapshotter ({where}), and its runhcs shim (hcsshim v0.15, containerd "
        '2.3 and later) refuses Hyper-V isolation on block CIM layers ("hyperv isolation is '
        'not supported with block CIM layers yet"); give the handler the windows '
        "snapshotter (runtimes.<handler>.snapshotter) or unpack with it",
    )


_RUNTIME_PLUGINS: Final = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri")
"""Where a dump keeps the CRI runtimes: version 3 and 4, version 2, version 1."""


def effective_snapshotter(
    handler: str, table: Mapping[str, Any], effective: Mapping[str, Any]
) -> tuple[str | None, str]:
    """(the snapshotter containerd unpacks this handler's images with, where it is set)."""
    own = table.get("snapshotter")
    if isinstance(own, str) and own:
        return own, f"the plan's runtimes.{handler}.snapshotter"
    plugins = effective.get("plugins")
    plugins = plugins if isinstance(plugins, Mapping) else {}
    for name in _RUNTIME_PLUGINS:
        runtime = _table(_table(_table(plugins.get(name), "containerd"), "runtimes"), handler)
        if isinstance(runtime.get("snapshotter"), str) and runtime["snapshotter"]:
            return runtime["snapshotter"], f"runtimes.{handler}.snapshotter in the configuration"
    images = _table(plugins.get("io.containerd.cri.v1.images"), "")
    default = images.get("snapshotter")
    if not default:
        for name in ("io.containerd.grpc.v1.cri", "cri"):
            default = default or _table(plugins.get(name), "containerd").get("snapshotter")
    if isinstance(default, str) and default:
        return default, "the CRI images plugin's snapshotter"
    return None, "containerd's default"


def _table(node: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        return {}
    found = node.get(key) if key else node
    return found if isinstance(found, Mapping) else {}


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
    if found is None:
        return None
    reason, message = found
    if reason == "HyperVUnavailable" and host.hyperv_why:
        message = host.hyperv_why
    return Refusal(reason, message)


def classify_handlers(
    handlers: Mapping[str, PlanEntry], host: Host
) -> tuple[dict[str, PlanEntry], dict[str, Refusal]]:
    """(eligible handler -> entry, ineligible handler -> refusal)."""
    eligible: dict[str, PlanEntry] = {}
    refused: dict[str, Refusal] = {}
    for handler in sorted(handlers):
        found = _refusal_of(handler, handlers[handler], host)
        if found is None:
            eligible[handler] = handlers[handler]
        else:
            refused[handler] = found
    return eligible, refused
