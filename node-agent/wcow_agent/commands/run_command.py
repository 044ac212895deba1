"""``wcow-agent run``: the DaemonSet's command; the agent loop (``loop/``) under the node's
file lock, with its metrics and health servers, until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from wcow_agent.commands.options import (
    DEFAULT_NAMESPACE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ClusterFactory,
    HostFactory,
    add_adopt_flag,
    add_host_flags,
    image_arg,
    node_agent,
    real_cluster,
    real_host,
)
from wcow_agent.config.files import FileLock, LockedError
from wcow_agent.host.interfaces import HostError
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster import ClusterError
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_contract.labels import STARTUP_TAINT
from wcow_support.health import HealthServer, StepHealth

log = logging.getLogger("wcow_agent")


def add_parser(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="watch the plan and keep this node's handlers applied and proven",
        description="Run as the node agent (a HostProcess DaemonSet pod). Needs NODE_NAME "
        "(downward API); reads the plan ConfigMap in WCOW_PLAN_NAMESPACE (default "
        f"{DEFAULT_NAMESPACE}).",
    )
    add_host_flags(run)
    run.add_argument("--metrics-port", type=int, default=9551, help="Prometheus /metrics")
    run.add_argument("--health-port", type=int, default=9552, help="/healthz and /readyz")
    run.add_argument("--resync-seconds", type=float, default=300.0, help="full reconcile interval")
    run.add_argument(
        "--drift-check-seconds",
        type=float,
        default=30.0,
        help="how often config.toml is checked for changes by others (default 30)",
    )
    run.add_argument(
        "--retry-seconds",
        type=float,
        default=30.0,
        help="delay before retrying after a failed or incomplete cycle (default 30)",
    )
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    add_adopt_flag(run)
    run.add_argument(
        "--pause-image",
        type=lambda text: image_arg("--pause-image", text),
        default=None,
        metavar="IMAGE",
        help="set containerd's pause (sandbox) image to IMAGE (1.x: sandbox_image, 2.x: "
        "pinned_images.sandbox), with a restart as for a plan change; the value it replaces "
        "is kept and put back when the flag is dropped or on uninstall. It decides the guest "
        "build of every Hyper-V pod on the node: one guest build per node pool (docs/agent.md)",
    )
    run.add_argument(
        "--startup-taint",
        default=STARTUP_TAINT,
        metavar="KEY",
        help="remove the taint KEY from this Node once every handler of the plan has a "
        "verdict, so a node registered with it takes no pod before (default "
        f"{STARTUP_TAINT}; empty: none; README, Autoscaling)",
    )
    run.set_defaults(func=cmd_run)


def install_signal_handlers(stop: threading.Event, wake: threading.Event) -> None:
    """SIGTERM (kubelet), SIGINT / Ctrl-C, and SIGBREAK (Windows consoles) stop the loop
    after the step in progress; canary steps are abandoned and cleaned up."""

    def handle(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping after the current step", signum)
        stop.set()
        wake.set()

    for name in ("SIGTERM", "SIGINT", "SIGBREAK"):
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, handle)


def cmd_run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stop = threading.Event()
    loop = prepare_run(args, os.environ, real_host, real_cluster, stop)
    if isinstance(loop, int):
        return loop
    install_signal_handlers(stop, loop.wake)
    return serve(args, loop)


def prepare_run(
    args: argparse.Namespace,
    environ: Any,
    host_factory: HostFactory,
    cluster_factory: ClusterFactory,
    stop: threading.Event,
) -> AgentLoop | int:
    node = environ.get("NODE_NAME", "")
    if not node:
        print(
            "error: NODE_NAME is not set: give the pod its node name through the downward "
            "API (env NODE_NAME from fieldRef spec.nodeName)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        host = host_factory(args, stop)
        cluster = cluster_factory()
    except (HostError, ClusterError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - kubeconfig errors come in many types
        print(f"error: cannot reach Kubernetes: {error}", file=sys.stderr)
        return EXIT_USAGE
    options = RunOptions(
        node_name=node,
        namespace=environ.get("WCOW_PLAN_NAMESPACE") or DEFAULT_NAMESPACE,
        resync_seconds=args.resync_seconds,
        drift_check_seconds=args.drift_check_seconds,
        retry_seconds=args.retry_seconds,
        startup_taint=args.startup_taint or None,
    )
    return AgentLoop(
        node_agent(args, host, stop),
        cluster,
        options,
        metrics=Metrics(),
        health=StepHealth(),
        stop=stop,
    )


def serve(args: argparse.Namespace, loop: AgentLoop) -> int:
    """Hold the lock, start the metrics and health servers, run until stopped."""
    from prometheus_client import start_http_server  # noqa: PLC0415

    lock = FileLock(loop.agent.paths.lock)
    try:
        lock.acquire()
    except (LockedError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    metrics_server, _ = start_http_server(args.metrics_port, registry=loop.metrics.registry)
    health_server = HealthServer(args.health_port, live=loop.health.liveness, ready=loop.readiness)
    health_server.start()
    loop.ports = {"metrics": int(metrics_server.server_address[1]), "health": health_server.port}
    log.info(
        "wcow-agent on node %s: plan %s/wcow-runtime-plan, config %s, metrics :%s, health :%s",
        loop.options.node_name,
        loop.options.namespace,
        loop.agent.paths.config,
        metrics_server.server_address[1],
        health_server.port,
    )
    layout = loop.agent.layout
    log.info("layout %s: %s", layout.distribution, layout.unplaced or layout.why)
    try:
        loop.run()
    finally:
        health_server.stop()
        metrics_server.shutdown()
        metrics_server.server_close()
        lock.release()
        log.info("stopped")
    return EXIT_OK
