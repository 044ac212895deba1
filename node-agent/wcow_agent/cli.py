"""``wcow-agent``: the Windows node agent.

- ``run``: the DaemonSet's command; watches the plan and keeps this node's handlers
  applied, proven and reported (``runner.py``).
- ``merge``: the offline half (choose the handlers this host can run, merge them into
  config.toml), for the demo and for nodes managed without Kubernetes.
- ``uninstall``: remove every table, file, label and annotation the agent owns.
- ``canary``: prove handlers on this node now and print the results (no labels).
- ``simulate``: N simulated Windows nodes running the real agent loop (``simulate/``).

Exit codes: 0 ok, 1 failed (the message says why), 2 usage or environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wcow_agent.agent import default_canary_image
from wcow_agent.attempt import Timeouts
from wcow_agent.canary import Canary, CanarySpec
from wcow_agent.cluster import Cluster, ClusterError
from wcow_agent.cycle import NodeAgent
from wcow_agent.eligibility import Host as EligibilityHost
from wcow_agent.eligibility import Refusal, classify_handlers
from wcow_agent.files import FileLock, LockedError, read_config, write_atomically
from wcow_agent.host.interfaces import Host, HostError
from wcow_agent.host.windows import (
    WindowsHostOptions,
    default_config_path,
    default_containerd_binary,
    default_work_dir,
    windows_host,
)
from wcow_agent.merge import (
    BUILTIN_RUNTIMES_1_6,
    BUILTIN_RUNTIMES_1_7,
    ConfigError,
    MergeResult,
    merge_config,
)
from wcow_agent.metrics import Metrics
from wcow_agent.plan import PlanError, load_plan
from wcow_agent.runner import AgentLoop
from wcow_agent.simulate.fleet import add_parser as _add_simulate
from wcow_agent.state import PRISTINE_SUFFIX, STATE_SUFFIX, Paths, StateJournal
from wcow_agent.uninstall import UninstallError, clean_node
from wcow_agent.watch import RunOptions
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.labels import STARTUP_TAINT
from wcow_contract.v1alpha1 import ImageReference
from wcow_contract.validation import is_dns1123_label
from wcow_support.health import HealthServer, StepHealth

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_NAMESPACE = "wcow-system"

log = logging.getLogger("wcow_agent")

HostFactory = Callable[[argparse.Namespace, threading.Event], Host]
ClusterFactory = Callable[[], Cluster]


# -- merge (offline) -----------------------------------------------------------------------


def _state_path(config: Path, given: str | None) -> Path:
    return Path(given) if given else config.with_name(config.name + STATE_SUFFIX)


# --containerd-version names a line; eligibility judges by its first release.
_LINE_VERSIONS = {"1.6": "1.6.0", "1.7": "1.7.0", "2": "2.0.0"}


def _read_existing(config: Path) -> str:
    if not config.exists():
        raise ConfigError(
            f"{config} does not exist: the agent never writes a config.toml holding only "
            "its own tables; create it with `containerd config default` first"
        )
    return read_config(config)


@dataclass(frozen=True)
class _OfflineMerge:
    config: Path
    journal: StateJournal
    before: str
    pristine: str | None
    refused: dict[str, Refusal]
    result: MergeResult

    @property
    def pristine_path(self) -> Path:
        return self.config.with_name(self.config.name + PRISTINE_SUFFIX)


def _merge_offline(args: argparse.Namespace) -> _OfflineMerge:
    """The handlers this host can run, merged into the file (nothing written yet)."""
    config = Path(args.config)
    host = EligibilityHost(
        parse_windows_build(args.host_build),
        hyperv_available=args.hyperv,
        containerd_version=_LINE_VERSIONS[args.containerd_version],
    )
    plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
    before = _read_existing(config)
    eligible, refused = classify_handlers(plan.handlers, host)
    journal, warning = StateJournal.load(_state_path(config, args.state))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    pristine_path = config.with_name(config.name + PRISTINE_SUFFIX)
    pristine = read_config(pristine_path) if pristine_path.exists() else None
    builtins = BUILTIN_RUNTIMES_1_6 if args.containerd_version == "1.6" else BUILTIN_RUNTIMES_1_7
    result = merge_config(
        before,
        {handler: entry.runtime for handler, entry in eligible.items()},
        journal.state.owned,
        builtins,
        pristine,
        fallback_version=3 if args.containerd_version == "2" else 2,
        adopt=args.adopt_handlers,
        adopted=journal.state.adopted,
    )
    return _OfflineMerge(config, journal, before, pristine, refused, result)


def _say_what_merge_does(merge: _OfflineMerge) -> None:
    result = merge.result
    for handler, why in merge.refused.items():
        print(f"not eligible: {handler}: {why.message}", file=sys.stderr)
    for handler, reason in result.conflicts.items():
        print(f"conflict: {handler}: {reason}", file=sys.stderr)
    for handler, table in sorted(result.adopted.items()):
        print(
            f"adopted: {handler}: replaces the hand-written table "
            f"{json.dumps(table, sort_keys=True)} (kept in {merge.journal.path.name}, written "
            "back when the handler leaves the plan)",
            file=sys.stderr,
        )
    for handler in result.restored:
        print(f"restored: {handler}: the hand-written table the agent had adopted", file=sys.stderr)
    summary = ", ".join(
        f"{label} {', '.join(names)}"
        for label, names in (
            ("added", result.added),
            ("updated", result.updated),
            ("removed", result.removed),
        )
        if names
    )
    print(f"config version {result.version}: {summary or 'no change'}", file=sys.stderr)


def _write_merge(merge: _OfflineMerge) -> None:
    """Write the file (atomically, keeping a backup) and the ownership, under the lock."""
    result, config, journal = merge.result, merge.config, merge.journal
    with FileLock(Paths(config).lock):
        if result.owned and not journal.state.owned and merge.pristine is None:
            # The file before the agent's first change: removing everything restores it.
            write_atomically(merge.pristine_path, merge.before, backup=False)
        if result.changed(merge.before):
            write_atomically(config, result.text)
            print(
                f"wrote {config} (previous file kept as {config.name}.wcow-backup); "
                "restart containerd to load it",
                file=sys.stderr,
            )
        adopted = {
            handler: table
            for handler, table in {**journal.state.adopted, **result.adopted}.items()
            if handler not in result.restored
        }
        journal.merged_offline(result.owned, adopted)
        if not result.owned:
            merge.pristine_path.unlink(missing_ok=True)


def cmd_merge(args: argparse.Namespace) -> int:
    try:
        merge = _merge_offline(args)
    except (ConfigError, PlanError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    _say_what_merge_does(merge)
    if not args.write:
        sys.stdout.write(merge.result.diff(merge.before, merge.config.name))
        return EXIT_OK
    try:
        _write_merge(merge)
    except LockedError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _add_merge(commands: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="merge a plan into a containerd config.toml, offline",
        description="Choose the plan's handlers this host can run and merge them into "
        "config.toml. Prints a unified diff; --write replaces the file atomically, keeps a "
        ".wcow-backup copy and records the tables it owns in a state file. It does not "
        "restart containerd.",
    )
    merge.add_argument("--config", required=True, help="containerd config.toml")
    merge.add_argument("--plan", required=True, help="plan.json from `wcow render --out`")
    merge.add_argument(
        "--host-build",
        required=True,
        metavar="10.0.N",
        help="the host's Windows build (node.kubernetes.io/windows-build)",
    )
    merge.add_argument(
        "--no-hyperv",
        dest="hyperv",
        action="store_false",
        help="the host cannot run Hyper-V isolated containers",
    )
    merge.add_argument(
        "--containerd-version",
        choices=("1.6", "1.7", "2"),
        default="1.7",
        help="containerd on the host: handlers needing settings it drops are not eligible "
        "(1.6 drops DefaultContainerAnnotations and ScrubLogs); also its built-in runtimes "
        "and the schema of a file without `version` (default 1.7)",
    )
    merge.add_argument("--state", help=f"ownership state file (default CONFIG{STATE_SUFFIX})")
    _add_adopt_flag(merge)
    merge.add_argument("--write", action="store_true", help="write the file instead of a diff")
    merge.set_defaults(func=cmd_merge)


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


def _add_adopt_flag(parser: Any) -> None:
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


# -- the node host and the cluster ----------------------------------------------------------


def _add_host_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help=r"containerd config.toml (default %%ProgramFiles%%\containerd\config.toml)",
    )
    parser.add_argument(
        "--containerd",
        default=None,
        help=r"containerd.exe (default %%ProgramFiles%%\containerd\containerd.exe)",
    )
    parser.add_argument("--crictl", default="crictl.exe", help="crictl (default: on PATH)")
    parser.add_argument(
        "--cri-endpoint",
        default="npipe:////./pipe/containerd-containerd",
        help="containerd's CRI endpoint",
    )
    parser.add_argument("--service-name", default="containerd", help="containerd's Windows service")
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
    return windows_host(
        WindowsHostOptions(
            containerd_binary=args.containerd or default_containerd_binary(),
            crictl=args.crictl,
            cri_endpoint=args.cri_endpoint,
            service_name=args.service_name,
            work_dir=args.work_dir or default_work_dir(),
            hyperv=args.hyperv,
        ),
        cancel=stop,
    )


def real_cluster() -> Cluster:
    from wcow_agent.k8s import KubernetesCluster  # noqa: PLC0415 - only `run` needs the client

    return KubernetesCluster.from_environment()


def _agent(args: argparse.Namespace, host: Host, stop: threading.Event) -> NodeAgent:
    return NodeAgent(
        host,
        Paths(Path(args.config or default_config_path())),
        log_root=args.work_dir or default_work_dir(),
        timeouts=Timeouts(restart=args.restart_timeout),
        cancel=stop,
        adopt=getattr(args, "adopt_handlers", frozenset()),
        canary_images=dict(args.canary_image),
        pause_image=getattr(args, "pause_image", None),
    )


# -- run -----------------------------------------------------------------------------------


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="watch the plan and keep this node's handlers applied and proven",
        description="Run as the node agent (a HostProcess DaemonSet pod). Needs NODE_NAME "
        "(downward API); reads the plan ConfigMap in WCOW_PLAN_NAMESPACE (default "
        f"{DEFAULT_NAMESPACE}).",
    )
    _add_host_flags(run)
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
    _add_adopt_flag(run)
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
        _agent(args, host, stop),
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
    try:
        loop.run()
    finally:
        health_server.stop()
        metrics_server.shutdown()
        metrics_server.server_close()
        lock.release()
        log.info("stopped")
    return EXIT_OK


# -- uninstall -----------------------------------------------------------------------------


def _add_uninstall(commands: Any) -> None:
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
    _add_host_flags(uninstall)
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
        agent = _agent(args, host_factory(args, stop), stop)
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


# -- canary (on demand, local) ----------------------------------------------------------


def _add_canary(commands: Any) -> None:
    canary = commands.add_parser(
        "canary",
        help="prove handlers on this node now and print the results as JSON",
        description="Starts a canary sandbox per handler through CRI and checks it "
        "through HCS, as `run` does; prints one JSON object per handler. Touches neither "
        "config.toml nor the Node (use the Node annotation runtime.wcow.dev/canary-request "
        "to have the running agent re-prove and re-label).",
    )
    _add_host_flags(canary)
    canary.add_argument("handlers", nargs="+", metavar="HANDLER")
    canary.add_argument("--plan", required=True, help="plan.json holding the handlers")
    canary.set_defaults(func=cmd_canary)


def cmd_canary(args: argparse.Namespace) -> int:
    return run_canaries(args, real_host)


def run_canaries(args: argparse.Namespace, host_factory: HostFactory) -> int:
    stop = threading.Event()
    try:
        plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
        host = host_factory(args, stop)
    except (PlanError, OSError, HostError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    unknown = [h for h in args.handlers if h not in plan.handlers]
    if unknown:
        print(f"error: not in the plan: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    canary = Canary(host.cri, host.hcs, args.work_dir or default_work_dir())
    code = EXIT_OK
    for handler in args.handlers:
        entry = plan.handlers[handler]
        build = host.windows.windows_build().label_value
        image = default_canary_image(entry, build, dict(args.canary_image))
        result = canary.run(CanarySpec.from_plan(handler, entry, image), stop)
        print(
            json.dumps(
                {
                    "handler": handler,
                    "passed": result.passed,
                    "reason": result.reason,
                    "message": result.message,
                    "durationSeconds": round(result.duration_seconds, 3),
                    "observed": dict(result.observed),
                },
                sort_keys=True,
            )
        )
        code = code if result.passed else EXIT_FAILED
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wcow-agent", description="wcow-runtime node agent")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_merge(commands)
    _add_run(commands)
    _add_uninstall(commands)
    _add_canary(commands)
    _add_simulate(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result
