"""``wcow-agent uninstall``: remove every table, file, label and annotation the agent owns."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from wcow_agent.commands.options import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ClusterFactory,
    HostFactory,
    add_host_flags,
    node_agent,
    real_cluster,
    real_host,
)
from wcow_agent.config.files import FileLock, LockedError
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.cycle.host_cleanup import UninstallError
from wcow_agent.host.interfaces import HostError
from wcow_agent.loop.node_cleanup import clean_node


def add_parser(commands: Any) -> None:
    uninstall = commands.add_parser(
        "uninstall",
        help="remove every table, file and label the agent owns; restart containerd once",
        description="Removes the agent's tables from config.toml (restoring the file as it "
        "was before the agent's first change when it can), restarts containerd once, "
        "deletes the agent's files beside config.toml, and, when NODE_NAME is set, removes "
        "the Node's labels and annotations the agent wrote (runtime.wcow.dev/<handler>, "
        "node.runtime.wcow.dev/hyperv, /containerd-line, the guest-build labels its status "
        "reported, runtime.wcow.dev/agent-status). Stop `wcow-agent run` first.",
    )
    add_host_flags(uninstall)
    uninstall.add_argument(
        "--no-kubernetes",
        action="store_true",
        help="leave the Node's labels and annotation alone (no API access needed)",
    )
    uninstall.set_defaults(func=cmd_uninstall)


def cmd_uninstall(args: argparse.Namespace) -> int:
    return uninstall(args, os.environ, real_host, real_cluster)


def uninstall(
    args: argparse.Namespace,
    environ: Any,
    host_factory: HostFactory,
    cluster_factory: ClusterFactory,
) -> int:
    stop = threading.Event()
    try:
        agent = node_agent(args, host_factory(args, stop), stop)
    except HostError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    code = EXIT_OK
    try:
        with FileLock(agent.paths.lock):
            for line in agent.uninstall():
                print(line, file=sys.stderr)
        agent.paths.lock.unlink(missing_ok=True)
    except (LockedError, UninstallError, HostError, ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        code = EXIT_FAILED
    node = environ.get("NODE_NAME", "")
    if args.no_kubernetes or not node:
        if not args.no_kubernetes:
            print("NODE_NAME not set: Node labels left as they are", file=sys.stderr)
        return code
    try:
        print(clean_node(cluster_factory(), node), file=sys.stderr)
    except Exception as error:  # noqa: BLE001 - report any API or config failure
        print(f"error: Node {node} not cleaned: {error}", file=sys.stderr)
        code = EXIT_FAILED
    return code
