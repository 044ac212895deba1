"""The paced rollout at fleet size: how long a plan change takes to reach every node against
the ideal, and what the fleet costs the API server once it is steady.

    .venv/bin/python benchmarks/rollout.py [--nodes 200] [--max-unavailable 10%]
                                           [--drain None|both]

Runs against the cluster KUBECONFIG points at, or else starts the project's local control
plane (`make control-plane` builds it). Starts `wcow-operator` and N simulated Windows nodes
running the real agent loop in this process (`wcow_agent.simulator.fleet.Fleet`, a 1 s containerd
restart and a 0.5 s canary as `wcow-agent simulate` defaults), creates one HyperV profile,
waits until every node runs it, then changes its `vm.memoryMB` and prints, one per line:

    nodes, maxUnavailable, waves              (waves = ceil(N / maxUnavailable))
    per-node apply: <seconds>                 (median, from the hosts' journals: preflight
                                               to the last canary)
    ideal: <seconds>                          (waves x per-node apply)
    every node applied: <seconds>             (the change until the last node's journal
                                               shows its canary done)
    rollout complete in status: <seconds>     (until status.rollout says Complete)
    peak nodes applying at once: <count>      (from the journals; must be <= maxUnavailable)
    first apply started: <seconds>            (the change until the first node's preflight)
    hand-over: median, p95                    (per freed slot: a node's last apply step to
                                               the preflight of the next node let into it)
      report: median, p95                     (the last apply step to the agent's report
                                               patched to its Node)
      operator: median, p95                   (the report to the rollout write letting the
                                               next node in: Node watch, hand-over, write)
      fan-out: median, p95                    (that write to the next node's rollout watch
                                               delivering it)
      agent start: median, p95                (delivered to the next node's preflight: its
                                               loop wakes, reads its Node, records the
                                               attempt, merges)
    API requests per node per minute: <rate>  (steady: every request the API server counted
                                               in --quiet-seconds, apiserver_request_total,
                                               less what the control plane alone made in
                                               as long before the operator started)
    API writes per node per minute: <rate>    (POST/PUT/PATCH/DELETE/APPLY; target 0)

With ``--drain both`` (the default), a second change of the same profile with
``spec.rollout.drain: Cordon`` follows (each node cordoned before it applies, uncordoned
after), and its figures print beside the first's, ``Cordon against None``:

    Cordon: every node applied: <seconds>     (the second change, as above)
    Cordon: rollout complete in status: <seconds>
    Cordon: peak nodes applying at once: <count>
    Cordon: hand-over: ...                    (as above; the operator's step includes the
                                               cordon)
    Cordon against None: <ratio>              (every node applied, Cordon / None)

and, for context, both windows' requests by verb and resource. The hand-over's steps are
timed in this process by wrapping each agent's client (``benchmarks/handover.py``): a write's
time is its earliest delivery to any agent's watch. Everything it
creates is deleted at the end.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.handover import HandOver, Recorder, breakdown, spread
from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    apiserver_requests,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
)
from tests.fleet.harness import Operator, View, running_operator
from tests.fleet.paced import (
    apply_windows,
    new_plan,
    patch_spec,
    peak_overlap,
    plan_hash,
    read_rollout,
    rolled_out,
)

from wcow_agent.loop.kubernetes_cluster import KubernetesCluster
from wcow_agent.simulator.fleet import Fleet, FleetCluster, FleetOptions
from wcow_agent.simulator.node import HostSettings
from wcow_contract.wire.rollout import Rollout
from wcow_operator.reconcile.rollout_decision import parse_max_unavailable

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})


def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    kube = client.ApiClient()
    run_id = f"rollout-{uuid.uuid4().hex[:6]}"
    hv = f"{run_id}-hv"
    limit = parse_max_unavailable_arg(args)
    waves = math.ceil(args.nodes / limit)
    options = FleetOptions(
        nodes=args.nodes,
        namespace=run_id,
        name_prefix=f"{run_id}-w",
        settings=HostSettings(
            restart_seconds=args.restart_seconds, canary_seconds=args.canary_seconds
        ),
        resync_seconds=args.agent_resync_seconds,
    )

    recorder = Recorder()

    def cluster() -> FleetCluster:
        return recorder.wrap(KubernetesCluster.from_kubeconfig(str(kubeconfig)))

    with (
        tempfile.TemporaryDirectory(prefix="wcow-rollout-bench-") as workdir,
        installed_crd(kube),
        namespace(kube, run_id) as ns,
    ):
        # What the control plane does on its own (its leases, the garbage collector's
        # discovery): subtracted, so the rate is what the operator and the agents cost.
        background = quiet(kube, args.quiet_seconds)
        with running_operator(
            kubeconfig,
            ns,
            Path(workdir) / "operator.log",
            "--max-unavailable",
            args.max_unavailable,
            "--log-level",
            "WARNING",
        ) as operator:
            fleet = Fleet(options, Path(workdir) / "nodes", cluster)
            try:
                started = time.perf_counter()
                fleet.start()
                print(f"# {args.nodes} simulated nodes up in {time.perf_counter() - started:.1f} s")
                figures, requests = measure(args, kube, operator, fleet, recorder, ns=ns, hv=hv)
            finally:
                problems = fleet.stop(cleanup=True, timeout=60)
                for problem in problems[:10]:
                    print(f"# warning: {problem}")

    report(args, limit, waves, figures, requests, background=background)


def quiet(kube: client.ApiClient, seconds: float) -> Counter[tuple[str, str]]:
    """Every request the API server counts in ``seconds`` (apiserver_request_total)."""
    before = apiserver_requests(kube)
    time.sleep(seconds)
    return apiserver_requests(kube) - before


@dataclass(frozen=True)
class Figures:
    per_node: float
    last: float
    complete: float
    peak: int
    rollout: Rollout | None
    hand_over: HandOver
    first: float
    changed: float  # time.time() of the change
    applies: list[float]  # every node's apply, seconds
    cordon: Cordoned | None = None


@dataclass(frozen=True)
class Cordoned:
    last: float  # every node applied
    complete: float
    peak: int
    hand_over: HandOver


def measure(
    args: argparse.Namespace,
    kube: client.ApiClient,
    operator: Operator,
    fleet: Fleet,
    recorder: Recorder,
    *,
    ns: str,
    hv: str,
) -> tuple[Figures, Counter[tuple[str, str]]]:
    """Create the profile, wait for every node; change it, time it; then a quiet window."""
    view = View(kube, [fleet])
    with profiles_cleaned_up(kube, [hv]):
        body = profile(
            hv,
            isolation="HyperV",
            windowsBuild="ltsc2022",
            vm={"processorCount": 2, "memoryMB": 2048},
        )
        created = time.time()
        client.CustomObjectsApi(kube).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        new_plan(operator, kube, ns, None)
        first = operator.until(
            "the profile on every node",
            lambda: (h := plan_hash(kube, ns)) and rolled_out(view, hv, h, args.nodes) and h,
            timeout=args.timeout,
        )
        print(f"# profile created: on every node in {time.time() - created:.1f} s")
        time.sleep(5)

        changed = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        second = new_plan(operator, kube, ns, first)
        operator.until(
            "the change on every node",
            lambda: (h := plan_hash(kube, ns)) != first and rolled_out(view, hv, h, args.nodes),
            timeout=args.timeout,
        )
        complete = time.time() - changed
        windows = apply_windows(fleet.nodes, changed)
        applied = {w.node for w in windows}
        missing = sorted(set(fleet.nodes) - applied)
        if missing:
            raise SystemExit(f"no apply in the journals of {len(missing)}: {missing[:5]}")
        per_node = statistics.median(w.seconds for w in windows)
        last = max(w.end for w in windows) - changed
        peak = peak_overlap(windows)
        hand_over = breakdown(windows, recorder, second, parse_max_unavailable_arg(args))
        rollout = read_rollout(kube, ns)

        time.sleep(args.settle_seconds)
        requests = quiet(kube, args.quiet_seconds)
        cordon = None
        if args.drain == "both":
            cordon = cordoned_change(args, kube, operator, fleet, recorder, ns=ns, hv=hv)
    first = min(w.start for w in windows) - changed
    applies = [w.seconds for w in windows]
    figures = Figures(
        per_node, last, complete, peak, rollout, hand_over, first, changed, applies, cordon
    )
    return figures, requests


def cordoned_change(
    args: argparse.Namespace,
    kube: client.ApiClient,
    operator: Operator,
    fleet: Fleet,
    recorder: Recorder,
    *,
    ns: str,
    hv: str,
) -> Cordoned:
    """The same change again with drain Cordon."""
    view = View(kube, [fleet])
    before = plan_hash(kube, ns)
    changed = time.time()
    patch_spec(kube, hv, {"vm": {"memoryMB": 4096}, "rollout": {"drain": "Cordon"}})
    plan = new_plan(operator, kube, ns, before)
    operator.until(
        "the Cordon change on every node",
        lambda: (h := plan_hash(kube, ns)) != before and rolled_out(view, hv, h, args.nodes),
        timeout=args.timeout,
    )
    complete = time.time() - changed
    windows = apply_windows(fleet.nodes, changed)
    if {w.node for w in windows} != set(fleet.nodes):
        raise SystemExit("with Cordon, not every node's journal shows an apply")
    return Cordoned(
        max(w.end for w in windows) - changed,
        complete,
        peak_overlap(windows),
        breakdown(windows, recorder, plan, parse_max_unavailable_arg(args)),
    )


def parse_max_unavailable_arg(args: argparse.Namespace) -> int:
    value = args.max_unavailable
    return parse_max_unavailable(value if value.endswith("%") else int(value), args.nodes)


def report(
    args: argparse.Namespace,
    limit: int,
    waves: int,
    figures: Figures,
    requests: Counter[tuple[str, str]],
    *,
    background: Counter[tuple[str, str]],
) -> None:
    minutes = args.quiet_seconds / 60
    per_node, last, rollout = figures.per_node, figures.last, figures.rollout
    ours = requests - background  # Counter subtraction keeps positive counts only
    total = sum(ours.values())
    writes = sum(c for (verb, _), c in ours.items() if verb in WRITES)
    print(f"nodes: {args.nodes}, maxUnavailable: {limit}, waves: {waves}")
    print(f"per-node apply: {per_node:.2f}")
    print(f"# per-node apply: {spread(figures.applies)}")
    print(f"ideal: {waves * per_node:.1f}")
    print(f"every node applied: {last:.1f}")
    print(f"rollout complete in status: {figures.complete:.1f}")
    print(f"peak nodes applying at once: {figures.peak}")
    opened = figures.hand_over.opened
    written = f"; the first wave let in {opened - figures.changed:.2f} s after" if opened else ""
    print(f"first apply started: {figures.first:.2f} s after the change{written}")
    print_hand_over("", figures.hand_over)
    print(f"API requests per node per minute: {total / args.nodes / minutes:.3f}")
    print(f"API writes per node per minute: {writes / args.nodes / minutes:.3f}")
    if (cordon := figures.cordon) is not None:
        print(f"Cordon: every node applied: {cordon.last:.1f}")
        print(f"Cordon: rollout complete in status: {cordon.complete:.1f}")
        print(f"Cordon: peak nodes applying at once: {cordon.peak}")
        print_hand_over("Cordon: ", cordon.hand_over)
        print(f"Cordon against None: {cordon.last / last:.2f}")
    print(f"# rollout ConfigMap: maxUnavailable {rollout.max_unavailable if rollout else None}")
    print(f"# every node applied / ideal: {last / (waves * per_node):.2f}")
    print(
        f"# agents resync every {args.agent_resync_seconds:.0f} s; "
        f"API requests in the quiet {args.quiet_seconds:.0f} s, by verb and resource:"
    )
    print_requests(requests)
    print(f"# the control plane alone, in {args.quiet_seconds:.0f} s before the operator:")
    print_requests(background)


def print_hand_over(prefix: str, hand_over: HandOver) -> None:
    """The hand-over between waves, and what it is made of (``benchmarks/handover.py``)."""
    print(f"{prefix}hand-over: {spread(hand_over.total)} (an apply's end to the next in its slot)")
    for step, seconds, what in (
        ("report", hand_over.report, "the apply's end to its agent's report patched"),
        ("operator", hand_over.operator, "the report to the rollout letting the next node in"),
        ("fan-out", hand_over.fan_out, "that rollout written to the next node's watch"),
        ("agent start", hand_over.start, "delivered to the next node's preflight"),
    ):
        print(f"{prefix}  {step}: {spread(seconds)} ({what})")


def print_requests(requests: Counter[tuple[str, str]]) -> None:
    for (verb, resource), count in sorted(requests.items()):
        if count:
            print(f"#   {verb:8} {resource or '-':24} {count}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--max-unavailable", default="10%", help="a count or a percentage")
    parser.add_argument("--restart-seconds", type=float, default=1.0)
    parser.add_argument("--canary-seconds", type=float, default=0.5)
    parser.add_argument(
        "--agent-resync-seconds",
        type=float,
        default=60.0,
        help="agents' full reconcile interval (wcow-agent run: 300); the quiet window sees "
        "each agent's resync once at the defaults",
    )
    parser.add_argument(
        "--drain",
        choices=("None", "both"),
        default="both",
        help="the change with drain None (and the quiet window), then again with Cordon",
    )
    parser.add_argument("--settle-seconds", type=float, default=10.0)
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    with cluster_kubeconfig() as kubeconfig:
        run(args, kubeconfig)


if __name__ == "__main__":
    main()
