"""``wcow-agent simulate``: N simulated Windows nodes running the real agent loop
(``simulator/fleet.py``) until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from wcow_agent.simulator.faults import parse_fault
from wcow_agent.simulator.fleet import Fleet, FleetCluster, FleetOptions
from wcow_agent.simulator.node import HostSettings, JournalEntry
from wcow_contract.catalog.windows_builds import parse_windows_build


def add_parser(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="run N simulated Windows nodes (real agent loop, in-memory Windows host)",
        description="Registers N Windows Node objects (unless they exist) and runs the real "
        "agent loop for each against an in-memory Windows host, in this process, against the "
        "cluster the kubeconfig points at. Ctrl-C or SIGTERM stops the agents and deletes "
        "the Nodes this run created (--no-cleanup keeps them). Nothing runs on Windows.",
    )
    simulate.add_argument("--nodes", type=int, required=True, help="how many nodes")
    simulate.add_argument("--name-prefix", default="sim-win-", help="Node names: PREFIX1..PREFIXN")
    simulate.add_argument(
        "--namespace",
        default=os.environ.get("WCOW_PLAN_NAMESPACE") or "wcow-system",
        help="the operator's namespace, where the plan ConfigMap is (default wcow-system)",
    )
    simulate.add_argument(
        "--kubeconfig", default=None, help="default: KUBECONFIG or ~/.kube/config"
    )
    _add_host_settings(simulate)
    simulate.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[=VALUE][@NODES]",
        help="canary-fail[=HANDLER], restart-fail[=HANDLER|IMAGE], slow-canary=SECONDS, "
        "kill-mid-apply[=TIMES], pull-fail[=IMAGE]; @NODES is a node name or glob "
        "(default: every node). Repeatable",
    )
    simulate.add_argument("--state-dir", default=None, help="nodes' disks (default: a temp dir)")
    simulate.add_argument(
        "--cleanup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="delete the Nodes this run created when it stops (default yes)",
    )
    simulate.add_argument("--resync-seconds", type=float, default=300.0)
    simulate.add_argument("--retry-seconds", type=float, default=10.0)
    simulate.add_argument("--journal", default=None, help="append host steps as JSON lines here")
    simulate.add_argument(
        "--startup-taint",
        default=None,
        metavar="KEY",
        help="register the Nodes with the NoSchedule taint KEY=pending, which each agent "
        "removes once every handler has a verdict (as wcow-agent run --startup-taint)",
    )
    simulate.add_argument("--log-level", default="INFO")
    simulate.set_defaults(func=cmd_simulate)


def _add_host_settings(simulate: Any) -> None:
    """What every simulated host is (``HostSettings``)."""
    simulate.add_argument("--host-build", default="10.0.20348", metavar="10.0.N")
    simulate.add_argument(
        "--hyperv",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="whether the hosts can run Hyper-V isolation (default yes)",
    )
    simulate.add_argument(
        "--pause-build",
        default=None,
        metavar="10.0.N",
        help="the build of the pause image the nodes pull (default: the host's): a node pool "
        "for Hyper-V pods of that guest build",
    )
    simulate.add_argument("--containerd-version", default="1.7.20")
    simulate.add_argument("--logical-processors", type=int, default=8)
    simulate.add_argument(
        "--restart-seconds", type=float, default=1.0, help="how long a containerd restart takes"
    )
    simulate.add_argument(
        "--canary-seconds", type=float, default=0.5, help="how long a canary sandbox takes to start"
    )


def fleet_options(args: argparse.Namespace) -> FleetOptions:
    """The options, checked; ValueError names the flag and the value."""
    if args.nodes < 1:
        raise ValueError(f"--nodes must be at least 1, not {args.nodes}")
    try:
        parse_windows_build(args.host_build)
    except ValueError as error:
        raise ValueError(f"--host-build {args.host_build!r}: {error}") from None
    if args.pause_build is not None:
        try:
            parse_windows_build(args.pause_build)
        except ValueError as error:
            raise ValueError(f"--pause-build {args.pause_build!r}: {error}") from None
    settings = HostSettings(
        pause_build=args.pause_build,
        build=args.host_build,
        hyperv=args.hyperv,
        containerd_version=args.containerd_version,
        logical_processors=args.logical_processors,
        restart_seconds=args.restart_seconds,
        canary_seconds=args.canary_seconds,
    )
    return FleetOptions(
        nodes=args.nodes,
        namespace=args.namespace,
        name_prefix=args.name_prefix,
        settings=settings,
        faults=[parse_fault(text) for text in args.fault],
        resync_seconds=args.resync_seconds,
        retry_seconds=args.retry_seconds,
        startup_taint=args.startup_taint or None,
    )


class JsonLines:
    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def __call__(self, entry: JournalEntry) -> None:
        line = json.dumps(
            {"time": entry.time, "node": entry.node, "event": entry.event, "detail": entry.detail},
            sort_keys=True,
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def cmd_simulate(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(threadName)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        options = fleet_options(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from wcow_agent.loop.kubernetes_cluster import KubernetesCluster  # noqa: PLC0415 - the client only here

    def cluster() -> FleetCluster:
        return KubernetesCluster.from_kubeconfig(args.kubeconfig)

    temporary = args.state_dir is None
    root = Path(args.state_dir or tempfile.mkdtemp(prefix="wcow-simulate-"))
    journal = JsonLines(Path(args.journal)) if args.journal else None
    fleet = Fleet(options, root, cluster, journal)
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        stop.set()

    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), handle)
    code = 0
    try:
        fleet.start()
        print(
            f"{len(fleet.nodes)} simulated Windows nodes ({options.settings.build}, Hyper-V "
            f"{'yes' if options.settings.hyperv else 'no'}, containerd "
            f"{options.settings.containerd_version}) watching {options.namespace}/"
            f"wcow-runtime-plan; disks under {root}. Ctrl-C stops.",
            file=sys.stderr,
        )
        stop.wait()
    except Exception as error:  # noqa: BLE001 - any API or config failure ends the run
        print(f"error: {error}", file=sys.stderr)
        code = 1
    finally:
        problems = fleet.stop(cleanup=args.cleanup)
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        if fleet.deleted:
            print(f"deleted {len(fleet.deleted)} Node(s) this run created", file=sys.stderr)
        if journal is not None:
            journal.close()
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    return code
