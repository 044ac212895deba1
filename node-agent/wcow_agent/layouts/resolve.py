"""The layout the agent works with: the distribution's preset (``--distribution NAME``) or
what discovery read (``auto``), then every flag the user gave over it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from wcow_agent.config.layout import NodeLayout, RestartMode
from wcow_agent.host.interfaces import NodeInventory
from wcow_agent.layouts.discovery import discover
from wcow_agent.layouts.hyperv_platforms import HyperVStance, hyperv_stance
from wcow_agent.layouts.presets import PRESETS, NodeEnvironment, PresetName, preset

DISTRIBUTION_CHOICES: Final[tuple[str, ...]] = ("auto", *PRESETS)


@dataclass(frozen=True)
class LayoutFlags:
    """The flags that shape a layout; None: not given (the preset's value holds). An empty
    ``drop_in_config`` or ``config_template`` says "none here"."""

    distribution: str = "auto"
    config: str | None = None
    drop_in_config: str | None = None
    config_template: str | None = None
    restart_mode: RestartMode | None = None
    service_name: str | None = None
    containerd: str | None = None
    crictl: str | None = None


def resolve_layout(
    flags: LayoutFlags,
    env: NodeEnvironment,
    inventory: NodeInventory | None,
    *,
    unplaced_config: str,
) -> NodeLayout:
    """The node's layout. ``inventory``: the node to discover (None: none to read, as off
    Windows; ``auto`` then means containerd's own layout). ``unplaced_config``: where an
    unplaced node keeps the agent's lock and state (it writes no configuration)."""
    if flags.distribution != "auto":
        name: PresetName = _preset_name(flags.distribution)
        return _override(preset(name, env), flags)
    if inventory is None:
        base = replace(preset("kubeadm", env), distribution="custom")
        return _override(replace(base, why="containerd's own layout (nothing to discover)"), flags)
    found = discover(inventory, env)
    if found.layout is not None:
        return _override(found.layout, flags)
    if flags.config is not None:
        # The user named the file: not a guess. The rest is containerd's own layout.
        base = replace(preset("kubeadm", env), distribution="custom", drop_in_dir=None)
        return _override(replace(base, why=f"discovery: {found.reason}"), flags)
    return NodeLayout(
        distribution="custom",
        config=Path(unplaced_config),
        restart_mode="none",
        why=found.reason,
        unplaced=found.reason,
    )


def _preset_name(text: str) -> PresetName:
    for name in PRESETS:
        if name == text:
            return name
    raise ValueError(f"--distribution {text!r}: one of {', '.join(DISTRIBUTION_CHOICES)}")


def _override(layout: NodeLayout, flags: LayoutFlags) -> NodeLayout:
    """Every flag given replaces the preset's value, and the layout says which did."""
    given = {
        "--config": flags.config,
        "--drop-in-config": flags.drop_in_config,
        "--config-template": flags.config_template,
        "--restart-mode": flags.restart_mode,
        "--service-name": flags.service_name,
        "--containerd": flags.containerd,
        "--crictl": flags.crictl,
    }
    named = [flag for flag, value in given.items() if value is not None]
    if not named:
        return layout
    return replace(
        layout,
        config=Path(flags.config) if flags.config is not None else layout.config,
        drop_in_dir=_path_or_none(flags.drop_in_config, layout.drop_in_dir),
        template=_path_or_none(flags.config_template, layout.template),
        restart_mode=flags.restart_mode or layout.restart_mode,
        service_name=flags.service_name or layout.service_name,
        containerd=Path(flags.containerd) if flags.containerd else layout.containerd,
        crictl=flags.crictl or layout.crictl,
        why=f"{layout.why}; overridden by {', '.join(named)}",
    )


def _path_or_none(flag: str | None, preset_value: Path | None) -> Path | None:
    if flag is None:
        return preset_value
    return Path(flag) if flag else None


HyperVFlag = Literal["auto", "yes", "no"]


def hyperv_for(layout: NodeLayout, flag: HyperVFlag) -> tuple[HyperVFlag, str | None]:
    """(the ``--hyperv`` the host adapter gets, the ``HyperVUnavailable`` message on this
    platform). With ``auto`` a platform that does not run Hyper-V isolated containers
    (AKS, GKE) answers "no" without asking Windows; ``yes`` and ``no`` are the user's."""
    stance: HyperVStance | None = hyperv_stance(layout.distribution)
    if stance is None:
        return flag, None
    if flag == "auto" and stance.forbidden:
        return "no", stance.message
    return flag, stance.message
