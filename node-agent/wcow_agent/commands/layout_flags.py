"""The flags that say where a node keeps containerd's configuration (``run``, ``uninstall``,
``canary``): ``--distribution`` and the ecosystem's names for each part of the layout, every
one overriding the distribution's preset (docs/distributions.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path, PureWindowsPath

from wcow_agent.config.layout import NodeLayout
from wcow_agent.host.interfaces import NodeInventory
from wcow_agent.host.windows import default_work_dir, program_files
from wcow_agent.layouts.presets import IMAGE_CRICTL, NodeEnvironment
from wcow_agent.layouts.resolve import DISTRIBUTION_CHOICES, LayoutFlags, resolve_layout

MOUNT_POINT_ENV = "CONTAINER_SANDBOX_MOUNT_POINT"
"""Where a HostProcess container's image is on the host (Kubernetes sets it in the
container's environment)."""


def add_layout_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--distribution",
        choices=DISTRIBUTION_CHOICES,
        default="auto",
        help="the distribution whose layout sets the defaults of the flags below; auto: read "
        "it from the node (the containerd or rke2 service, their folders); default auto",
    )
    parser.add_argument(
        "--config",
        default=None,
        help=r"containerd's root config file (default: the distribution's; auto: the "
        r"containerd service's --config, else %%ProgramFiles%%\containerd\config.toml)",
    )
    parser.add_argument(
        "--drop-in-config",
        default=None,
        metavar="DIR",
        help="the folder of drop-ins the root config imports, where the agent keeps its own "
        "wcow-runtime.toml (containerd 2.x); empty: none (default: the distribution's)",
    )
    parser.add_argument(
        "--config-template",
        default=None,
        metavar="FILE",
        help="the template the distribution renders the root config from at every start "
        "(RKE2's config-v3.toml.tmpl); empty: none (default: the distribution's)",
    )
    parser.add_argument(
        "--restart-mode",
        choices=("service", "none"),
        default=None,
        help="service: restart --service-name for a new configuration; none: never restart, "
        "report RestartRequired and wait for the node's owner (default service)",
    )
    parser.add_argument(
        "--service-name",
        default=None,
        help="the Windows service to restart: containerd's, or its owner's (rke2) "
        "(default: the distribution's)",
    )
    parser.add_argument(
        "--containerd",
        default=None,
        help=r"containerd.exe, for --version and config dump (default: the distribution's; "
        r"auto: the containerd service's program)",
    )
    parser.add_argument(
        "--crictl",
        default=None,
        help="crictl.exe (default: the one in the agent's image, else the distribution's)",
    )


def node_environment(environ: os._Environ[str] | dict[str, str] | None = None) -> NodeEnvironment:
    env = os.environ if environ is None else environ
    return NodeEnvironment(program_files=program_files(), image_crictl=image_crictl(env))


def image_crictl(environ: os._Environ[str] | dict[str, str]) -> str | None:
    """The agent image's crictl.exe (deploy/docker/agent.windows.Dockerfile), when the agent
    runs from the image; None otherwise."""
    mount = environ.get(MOUNT_POINT_ENV)
    if not mount:
        return None
    path = os.path.join(mount, *PureWindowsPath(IMAGE_CRICTL).parts)
    return path if Path(path).is_file() else None


def node_layout(args: argparse.Namespace, inventory: NodeInventory | None) -> NodeLayout:
    """The layout from the flags over the distribution's preset (or what ``auto`` reads)."""
    flags = LayoutFlags(
        distribution=args.distribution,
        config=args.config,
        drop_in_config=args.drop_in_config,
        config_template=args.config_template,
        restart_mode=args.restart_mode,
        service_name=args.service_name,
        containerd=args.containerd,
        crictl=args.crictl,
    )
    work_dir = args.work_dir or default_work_dir()
    return resolve_layout(
        flags,
        node_environment(),
        inventory,
        unplaced_config=str(PureWindowsPath(work_dir, "unplaced", "config.toml")),
    )
