"""What the commands share: exit codes, the flags of the commands that run on a node (host,
canary images, adoption), and the real host and cluster they run against."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wcow_agent.commands.layout_flags import add_layout_flags, node_layout
from wcow_agent.config.state import Paths
from wcow_agent.cycle.node_agent import NodeAgent
from wcow_agent.cycle.transaction import Timeouts
from wcow_agent.host.interfaces import Host
from wcow_agent.host.node_inventory import RegistryNodeInventory
from wcow_agent.host.process import on_windows
from wcow_agent.host.windows import (
    WindowsHostOptions,
    default_containerd_binary,
    default_work_dir,
    windows_host,
)
from wcow_agent.layouts.resolve import hyperv_for
from wcow_agent.loop.cluster import Cluster
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.v1alpha1 import ImageReference
from wcow_contract.validation import is_dns1123_label

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_NAMESPACE = "wcow-system"

HostFactory = Callable[[argparse.Namespace, threading.Event], Host]
ClusterFactory = Callable[[], Cluster]
IMAGE_REFERENCE: TypeAdapter[str] = TypeAdapter(ImageReference)


def image_arg(flag: str, text: str) -> str:
    """An image reference as the profile's ``spec.canary.image`` takes it."""
    try:
        return str(IMAGE_REFERENCE.validate_python(text))
    except ValidationError as error:
        why = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: {why}") from None


def canary_image_arg(text: str) -> tuple[str, str]:
    """``--canary-image 10.0.N=IMAGE`` (a build or release alias: ltsc2022=...)."""
    build, sep, image = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--canary-image {text!r}: expected BUILD=IMAGE")
    try:
        label = parse_windows_build(build).label_value
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--canary-image {text!r}: {error}") from None
    return label, image_arg("--canary-image", image)


def handler_list(text: str) -> frozenset[str]:
    """``--adopt-handlers a,b``: containerd handler names (DNS-1123 labels)."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    bad = sorted(name for name in names if not is_dns1123_label(name))
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"--adopt-handlers: {', '.join(map(repr, bad)) or repr(text)} is not a list of "
            "containerd handler names (DNS-1123 labels, comma-separated)"
        )
    return names


def add_adopt_flag(parser: Any) -> None:
    parser.add_argument(
        "--adopt-handlers",
        type=handler_list,
        default=frozenset(),
        metavar="NAME,...",
        help="take over config.toml's hand-written tables of these handlers (e.g. containerd "
        "1.7's runhcs-wcow-hypervisor) when the plan has them, instead of reporting a "
        "Conflict; the replaced table is kept in the state file and written back when the "
        "handler leaves the plan",
    )


def add_host_flags(parser: argparse.ArgumentParser) -> None:
    add_layout_flags(parser)
    parser.add_argument(
        "--cri-endpoint",
        default="npipe:////./pipe/containerd-containerd",
        help="containerd's CRI endpoint",
    )
    parser.add_argument(
        "--work-dir",
        default=None,
        help=r"canary logs and crictl request files (default %%ProgramData%%\wcow-agent)",
    )
    parser.add_argument(
        "--hyperv",
        choices=("auto", "yes", "no"),
        default="auto",
        help="whether this host can run Hyper-V isolation (auto: ask Windows)",
    )
    parser.add_argument(
        "--canary-image",
        type=canary_image_arg,
        action="append",
        default=[],
        metavar="BUILD=IMAGE",
        help="the image a canary pulls through CRI and runs under a handler whose profile "
        "names no spec.canary.image, per guest build (Hyper-V) or host build (process), e.g. "
        "10.0.20348=mcr.microsoft.com/windows/nanoserver:ltsc2022; repeatable (docs/agent.md)",
    )
    parser.add_argument(
        "--restart-timeout",
        type=float,
        default=120.0,
        help="seconds containerd may take to restart and answer on CRI (default 120)",
    )


def real_host(args: argparse.Namespace, stop: threading.Event) -> Host:
    if not on_windows():
        return windows_host(WindowsHostOptions("", ""))  # refuses, saying why
    inventory = RegistryNodeInventory()
    layout = node_layout(args, inventory)
    hyperv, _ = hyperv_for(layout, args.hyperv)
    return windows_host(
        WindowsHostOptions(
            containerd_binary=str(layout.containerd or default_containerd_binary()),
            crictl=layout.crictl,
            cri_endpoint=args.cri_endpoint,
            service_name=layout.service_name,
            work_dir=args.work_dir or default_work_dir(),
            hyperv=hyperv,
            restart_mode=layout.restart_mode,
        ),
        cancel=stop,
        inventory=inventory,
    )


def real_cluster() -> Cluster:
    from wcow_agent.loop.kubernetes_cluster import KubernetesCluster  # noqa: PLC0415 - only `run` needs the client

    return KubernetesCluster.from_environment()


def node_agent(args: argparse.Namespace, host: Host, stop: threading.Event) -> NodeAgent:
    layout = node_layout(args, host.inventory)
    return NodeAgent(
        host,
        Paths(layout.config),
        log_root=args.work_dir or default_work_dir(),
        timeouts=Timeouts(restart=args.restart_timeout),
        cancel=stop,
        adopt=getattr(args, "adopt_handlers", frozenset()),
        canary_images=dict(args.canary_image),
        pause_image=getattr(args, "pause_image", None),
        layout=layout,
        hyperv_why=hyperv_for(layout, args.hyperv)[1],
    )
