"""The soak: the operator, its webhook and a fleet for M minutes under changes and faults.

    .venv/bin/python benchmarks/soak.py [--nodes 200] [--minutes 60] [--seed 1]

Starts a control plane of its own (`tests/control_plane.py`; it kills parts of it, so never
the cluster KUBECONFIG points at), two `wcow-operator` replicas with leader election on the
real Lease and the admission webhook (each replica serves it; a loopback front hands each
call to a ready replica, as a Service would), and `--nodes` simulated Windows nodes running
the real agent loop (`wcow-agent simulate`, two processes: all but one node in one, the last
in its own so it can be frozen). After a warm-up (every node reported, the profiles created
and on every node) it runs for `--minutes`:

- a profile change every minute: the HyperV profile's `vm.memoryMB`; about one in five bad
  (a runtime path no node has: the canaries fail on the nodes let in, the rollout halts),
  fixed the minute after; a rollout halted otherwise (a frozen node timed out) is resumed
  with the resume annotation instead of a change;
- a pod of a wcow class created through the webhook every `--pod-interval` s;
- faults at random times (one every 45-105 s, drawn with `--seed`): kube-apiserver SIGKILLed
  for 4 s; etcd SIGKILLed for 4 s; the leading replica SIGKILLed and, 5 s later, started
  again under its name (a container restart) or as a new pod (the standby takes over); the
  single-node agent SIGSTOPped for 20-90 s, then SIGCONTed.

Then a last good change, which must reach every node (`converged`), a quiet minute, and it
prints, one figure a line:

    errors in logs: N              ERROR/CRITICAL records and stray tracebacks in the
                                   operators' and agents' logs, less those an injected
                                   fault explains (see EXPECTED)
    failed admissions: N           pod creations refused or failed outside an API-server
                                   outage (kube-apiserver or etcd down, until 15 s after
                                   the server answered again), and pods admitted without
                                   the webhook's sizing (never excused)
    permissions violated: N        applies after the warm-up (a preflight in a host's
                                   journal) whose node no version of the rollout ConfigMap
                                   seen within 5 s of it, or in force then, lets in
    operator RSS MiB: START -> END
    operator threads: START -> END
    operator open files: START -> END
                                   the replica process that ran longest (whole minutes; a
                                   tie: the leader): its first sample after the warm-up
                                   (max(2 min, a tenth of the run) after its start or the
                                   soak's) and its last, at the end
    requests per node per minute at rest: X   apiserver_request_total in the quiet minute,
                                   less as long of the control plane alone, per node

and exits 1 when a figure breaks its bound: errors, failed admissions or permissions
violated above 0; RSS up more than 10%; threads up more than 5; open files up more than 10;
no convergence; a replica that exited without being killed. Bounded: every wait has a
timeout, and the whole run about `--minutes` plus the set-up (minutes at 200 nodes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rollout import print_requests, quiet
from benchmarks.soak_parts import (
    Incarnation,
    LogError,
    PodStream,
    Replicas,
    RolloutRecord,
    failed_admissions,
    log_errors,
    running_thread,
    unpermitted,
)
from tests.control_plane import ControlPlane, running
from tests.e2e.operator_harness import CRD_FILE, GROUP, PLURAL, VERSION, profile, wait_for
from tests.faults.harness import journal_entries, lease, simulated_agent
from tests.fleet.harness import View
from tests.fleet.paced import (
    BAD_CHANGE,
    Window,
    annotate_resume,
    halted,
    journal_windows,
    patch_spec,
    plan_hash,
    rolled_out,
)

NS, PODS_NS = "wcow-soak", "soak-pods"
HV, SIZED = "soak-hv", "soak-sized"
NAMES = ("soak-a", "soak-b")
DOWN_SECONDS = 4.0  # kube-apiserver or etcd: inside the Lease's 10 s renew deadline
ADMISSION_GRACE = 15.0
FIXED = {"containerd": None}  # a merge patch: the bad runtime path removed


@dataclass
class Soak:
    args: argparse.Namespace
    plane: ControlPlane
    kube: client.ApiClient
    workdir: Path
    replicas: Replicas
    frozen: Callable[[], object]  # the single-node agent's process
    api_down: list[tuple[float, float]] = field(default_factory=list)  # kill to ready again
    freezes: list[tuple[float, float]] = field(default_factory=list)  # SIGSTOP to SIGCONT
    faults: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    stopped_until: float = 0.0  # the frozen agent's SIGCONT
    last_bad: bool = False
    freeze_seconds: float = 0.0

    # -- faults --

    def fault(self, kind: str, rng: random.Random) -> None:
        began = time.time()
        if kind in ("kube-apiserver", "etcd"):
            self.plane.kill(kind)
            time.sleep(DOWN_SECONDS)
            self.plane.restart(kind)
            if kind == "etcd":  # the API server answers again once it reaches etcd
                self.plane.wait_ready()
            self.api_down.append((began, time.time()))
            self.faults.append(f"{kind} down {time.time() - began:.0f} s")
        elif kind == "leader":
            holder = lease(self.kube, NS)[0]
            slot = self.replicas.slot(holder)
            if slot is None:
                self.faults.append(f"leader: none to kill (holder {holder})")
                return
            self.replicas.kill(slot)
            time.sleep(5)
            # Half the time the kubelet restarts the container (the same pod name: it takes
            # its Lease back at once), half a new pod replaces it (the standby takes over once
            # the Lease expires).
            same = rng.random() < 0.5
            self.replicas.start(slot, holder if same else None)
            how = "restarted under its name" if same else "replaced by a new pod"
            self.faults.append(f"leader {holder} SIGKILLed, {how}")
        elif kind == "agent" and self.stopped_until:
            self.faults.append("agent: frozen already")
        elif kind == "agent":
            seconds = rng.uniform(20, 90)
            self.frozen().send_signal(signal.SIGSTOP)  # type: ignore[attr-defined]
            self.stopped_until = time.time() + seconds
            self.freeze_seconds = seconds
            self.faults.append(f"agent SIGSTOP {seconds:.0f} s")

    def thaw(self, now: float, force: bool = False) -> None:
        if self.stopped_until and (force or now >= self.stopped_until):
            self.frozen().send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
            self.freezes.append((self.stopped_until - self.freeze_seconds, now))
            self.stopped_until = 0.0

    # -- changes --

    def change(self, minute: int, rng: random.Random) -> None:
        view = View(self.kube, [])
        memory = 2048 + 64 * (minute % 30 + 1)
        if self.last_bad:
            patch_spec(self.kube, HV, {**FIXED, "vm": {"memoryMB": memory}})
            annotate_resume(self.kube, HV, f"soak-{minute}")
            self.changes.append("fixed")
            self.last_bad = False
        elif halted(view, HV):
            annotate_resume(self.kube, HV, f"soak-{minute}")
            self.changes.append("resumed")
        elif rng.random() < self.args.bad_fraction:
            patch_spec(self.kube, HV, BAD_CHANGE)
            self.changes.append("bad")
            self.last_bad = True
        else:
            patch_spec(self.kube, HV, {"vm": {"memoryMB": memory}})
            self.changes.append("good")

    def loop(self, rng: random.Random) -> None:
        """``--minutes`` of changes (every minute) and faults (at random): bounded by the
        clock, each fault by its own timeouts."""
        start = time.time()
        end = start + self.args.minutes * 60
        next_change, next_fault = start + 60, start + rng.uniform(20, 60)
        minute = 0
        while (now := time.time()) < end:
            self.thaw(now)
            self.replicas.keep_running()
            if now >= next_change:
                try:
                    self.change(minute + 1, rng)
                except ApiException as error:  # a server just restarted, slow: again in 5 s
                    self.changes.append(f"failed ({error.status})")
                    next_change = now + 5
                else:
                    minute += 1
                    next_change += 60
            elif now >= next_fault and now < end - 30:
                self.fault(rng.choice(("kube-apiserver", "etcd", "leader", "agent")), rng)
                next_fault = time.time() + rng.uniform(45, 105)
            time.sleep(1)
        self.thaw(time.time(), force=True)

    def converge(self) -> float:
        """A last good change, resumed: the seconds until every node runs it and the profile
        says RolledOut for it."""
        view = View(self.kube, [])
        old = plan_hash(self.kube, NS)
        began = time.time()
        patch_spec(self.kube, HV, {**FIXED, "vm": {"memoryMB": 1536}})
        annotate_resume(self.kube, HV, "soak-end")
        wait_for(
            "the last change on every node",
            lambda: (
                (h := plan_hash(self.kube, NS)) != old
                and h
                and rolled_out(view, HV, h, self.args.nodes)
            ),
            timeout=self.args.converge_timeout,
        )
        return time.time() - began


# -- set-up --


@contextlib.contextmanager
def fleet(plane: ControlPlane, workdir: Path, nodes: int) -> Iterator[list[object]]:
    """All nodes but one in one ``wcow-agent simulate`` process, the last in its own (the
    one the soak freezes); yields both processes."""
    flags = ("--retry-seconds", "2", "--no-cleanup", "--log-level", "WARNING")
    with (
        simulated_agent(
            plane.kubeconfig, NS, "soak-w", workdir / "fleet.jsonl", workdir / "fleet.log",
            *flags, nodes=nodes - 1, stop_seconds=120,
        ) as big,
        simulated_agent(
            plane.kubeconfig, NS, "soak-p", workdir / "frozen.jsonl", workdir / "frozen.log",
            *flags,
        ) as small,
    ):  # fmt: skip
        yield [big, small]


def create_crd(kube: client.ApiClient) -> None:
    """The CRD, for the plane's life (the plane is thrown away: nothing is removed)."""
    body = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    client.ApiextensionsV1Api(kube).create_custom_resource_definition(body)
    custom = client.CustomObjectsApi(kube)
    wait_for("the CRD served", lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))


def reported(core: client.CoreV1Api) -> int:
    """Nodes whose agent has reported (its status annotation)."""
    from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION  # noqa: PLC0415

    nodes = core.list_node(_request_timeout=30).items
    return sum(1 for n in nodes if AGENT_STATUS_ANNOTATION in (n.metadata.annotations or {}))


def warm_up(args: argparse.Namespace, kube: client.ApiClient, pods: PodStream) -> float:
    """Every node reported; the profiles created and on every node; a pod admitted and sized
    by the webhook. Returns the seconds it took."""
    began = time.time()
    core = client.CoreV1Api(kube)
    timeout = args.converge_timeout
    wait_for("every node's first report", lambda: reported(core) == args.nodes, timeout)
    custom = client.CustomObjectsApi(kube)
    vm = {"processorCount": 2, "memoryMB": 2048}
    sizing = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}
    for body in (
        profile(HV, isolation="HyperV", windowsBuild="ltsc2022", vm=vm),
        profile(SIZED, isolation="HyperV", windowsBuild="ltsc2022", vm=sizing),
    ):
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    view = View(kube, [])
    wait_for(
        "the profiles on every node",
        lambda: (h := plan_hash(kube, NS)) and rolled_out(view, HV, h, args.nodes),
        timeout,
    )
    wait_for(
        "a pod sized by the webhook",
        lambda: any(what == "sized" for _, _, what in pods.outcomes),
        timeout=120,
    )
    return time.time() - began


def sample_every(replicas: Replicas, seconds: float, stop: threading.Event) -> Callable[[], None]:
    def run() -> None:
        while not stop.is_set():
            replicas.sample()
            stop.wait(seconds)

    return run


# -- the run --


def run(args: argparse.Namespace, workdir: Path) -> int:
    rng = random.Random(args.seed)
    with running(workdir / "plane") as plane:
        kube = config.new_client_from_config(str(plane.kubeconfig))
        core = client.CoreV1Api(kube)
        create_crd(kube)
        for name in (NS, PODS_NS):
            core.create_namespace({"metadata": {"name": name}})
        wait_for("the default ServiceAccount",
                 lambda: core.read_namespaced_service_account("default", PODS_NS))  # fmt: skip
        background = quiet(kube, args.quiet_seconds)
        (workdir / "operators").mkdir(exist_ok=True)
        replicas = Replicas(plane.kubeconfig, NS, workdir / "operators", NAMES)
        replicas.flags = (
            "--max-unavailable", "10%", "--rollout-timeout-seconds", "60",
            "--log-level", "INFO",
        )  # fmt: skip
        replicas.front.start()
        try:
            first = replicas.start(NAMES[0]).identity
            wait_for(f"{first} to lead", lambda: lease(kube, NS)[0] == first, 120)
            replicas.start(NAMES[1])
            with fleet(plane, workdir, args.nodes) as agents:
                soak = Soak(args, plane, kube, workdir, replicas, lambda: agents[1])
                return soak_and_measure(soak, rng, background)
        finally:
            replicas.stop()
            replicas.front.stop()


def soak_and_measure(soak: Soak, rng: random.Random, background: Counter[tuple[str, str]]) -> int:
    args, kube = soak.args, soak.kube
    core = client.CoreV1Api(kube)
    pods = PodStream(core, PODS_NS, SIZED, args.pod_interval)
    record = RolloutRecord(core, NS)
    sampling = threading.Event()
    with running_thread(sample_every(soak.replicas, 15, sampling), sampling, "samples"):
        with (
            running_thread(pods.run, pods.stopping, "pods"),
            running_thread(record.run, record.stopping, "rollout-record"),
        ):
            setup = warm_up(args, kube, pods)
            warmed = time.time()
            print(f"# warm-up: {args.nodes} nodes reported, profiles on every node, "
                  f"a pod sized in {setup:.0f} s", flush=True)  # fmt: skip
            soak.loop(rng)
            converged = soak.converge()
        # At rest: the pods and the rollout watch of this process stopped, so the window
        # counts what the operators and the agents ask.
        time.sleep(10)
        rest = quiet(kube, args.quiet_seconds)
        soak.replicas.sample()
    figures = Figures.judge(soak, warmed, pods, record)
    return figures.report(soak, converged, rest - background)


LOG_GRACE = 30.0
# What an injected fault explains: a record in an agent's or an operator's log while the
# API server could not answer (kube-apiserver or etcd down, until LOG_GRACE s after it
# answered again) that says so: a refused or reset connection, a timeout, or the server's
# 5xx / 429 while it starts. Anything else, or at any other time, counts.
EXPECTED = re.compile(
    r"Connection refused|ConnectionRefusedError|Connection reset|ConnectionResetError|"
    r"RemoteDisconnected|ProtocolError|MaxRetryError|NewConnectionError|timed out|"
    r"Timeout|EOF occurred|\(5\d\d\)|Reason: (Internal Server Error|Service Unavailable|"
    r"Too Many Requests)|HTTP response headers|etcdserver"
)


@dataclass
class Figures:
    errors: list[LogError]
    excused: int
    admissions: list[tuple[float, str]]
    violations: list[Window]
    windows: int
    measured: Incarnation | None
    pods: tuple[int, int]  # created after the warm-up; of those, not admitted and sized

    @classmethod
    def judge(cls, soak: Soak, warmed: float, pods: PodStream, record: RolloutRecord) -> Figures:
        logs = [soak.workdir / "fleet.log", soak.workdir / "frozen.log"]
        logs += sorted((soak.workdir / "operators").glob("*.log"))
        errors, excused = [], 0
        down = [(start, end + LOG_GRACE) for start, end in soak.api_down]
        frozen = [(start, end + LOG_GRACE) for start, end in soak.freezes]
        for log in logs:
            faults = down + frozen if log.name == "frozen.log" else down
            for error in log_errors(log):
                if any(a <= error.time <= b for a, b in faults) and EXPECTED.search(error.text):
                    excused += 1
                else:
                    errors.append(error)
        outcomes = [o for o in pods.outcomes if o[0] >= warmed]
        outages = [(start, end + ADMISSION_GRACE) for start, end in soak.api_down]
        entries = journal_entries(soak.workdir / "fleet.jsonl")
        entries += journal_entries(soak.workdir / "frozen.jsonl")
        windows = journal_windows(entries, warmed)
        return cls(
            errors,
            excused,
            failed_admissions(outcomes, outages),
            unpermitted(windows, record.versions),
            len(windows),
            longest(
                soak.replicas.history, warmed, warm_up_seconds(soak.args), lease(soak.kube, NS)[0]
            ),
            (len(outcomes), sum(1 for *_, what in outcomes if what != "sized")),
        )

    def report(self, soak: Soak, converged: float, rest: Counter[tuple[str, str]]) -> int:
        args = soak.args
        measured = self.measured
        first = measured.samples[0] if measured else (0.0, 0.0, 0, 0)
        last = measured.samples[-1] if measured else (0.0, 0.0, 0, 0)
        per_node = sum(rest.values()) / args.nodes / (args.quiet_seconds / 60)
        print(f"errors in logs: {len(self.errors)}")
        print(f"failed admissions: {len(self.admissions)}")
        print(f"permissions violated: {len(self.violations)}")
        print(f"operator RSS MiB: {first[1]:.1f} -> {last[1]:.1f}")
        print(f"operator threads: {first[2]} -> {last[2]}")
        print(f"operator open files: {first[3]} -> {last[3]}")
        print(f"requests per node per minute at rest: {per_node:.3f}")
        broken = bounds_broken(self, soak, first, last)
        self.details(soak, converged, measured)
        print(f"# at rest, {args.quiet_seconds:.0f} s, by verb and resource (less the plane's):")
        print_requests(rest)
        for line in broken:
            print(f"# BOUND BROKEN: {line}")
        return 1 if broken else 0

    def details(self, soak: Soak, converged: float, measured: Incarnation | None) -> None:
        counts = Counter(soak.changes)
        print(f"# changes: {dict(counts)}; faults ({len(soak.faults)}): {'; '.join(soak.faults)}")
        print(f"# the last change on every node {converged:.0f} s after it")
        created, refused = self.pods
        print(f"# {created} pods created after the warm-up, {refused} not admitted and sized "
              f"({refused - len(self.admissions)} excused: in an API-server outage)")  # fmt: skip
        print(f"# {self.windows} applies judged from the journals; {self.excused} log errors "
              "explained by an injected fault")  # fmt: skip
        if measured:
            print(f"# the figures are {measured.identity}'s, the replica that ran longest")
        holder = lease(soak.kube, NS)[0]
        for incarnation in soak.replicas.history:
            print(f"# {describe(incarnation, holder)}")
        for error in self.errors[:10]:
            print(f"# error: {error.log} {error.text}")
        for when, what in self.admissions[:10]:
            print(
                f"# failed admission at {time.strftime('%H:%M:%S', time.localtime(when))}: {what}"
            )
        for window in self.violations[:10]:
            print(f"# applied without permission: {window}")
        for line in soak.replicas.unexpected_exits:
            print(f"# replica exited on its own: {line}")


def bounds_broken(
    figures: Figures,
    soak: Soak,
    first: tuple[float, float, int, int],
    last: tuple[float, float, int, int],
) -> list[str]:
    broken = [
        f"{name}: {count} > 0"
        for name, count in (
            ("errors in logs", len(figures.errors)),
            ("failed admissions", len(figures.admissions)),
            ("permissions violated", len(figures.violations)),
            ("replicas exited on their own", len(soak.replicas.unexpected_exits)),
        )
        if count
    ]
    if figures.measured is None:
        broken.append("no replica ran past the warm-up")
    if last[1] > first[1] * 1.10:
        broken.append(f"RSS grew {last[1] / first[1] - 1:.0%} (> 10%)")
    if last[2] > first[2] + 5:
        broken.append(f"threads grew by {last[2] - first[2]} (> 5)")
    if last[3] > first[3] + 10:
        broken.append(f"open files grew by {last[3] - first[3]} (> 10)")
    return broken


def describe(incarnation: Incarnation, holder: str | None) -> str:
    """One replica process: its life and its first and last samples."""
    ended = incarnation.ended or time.time()
    minutes = (ended - incarnation.started) / 60
    life = f"{incarnation.identity} ({incarnation.name}) up {minutes:.1f} min"
    if incarnation.ended is None:
        life += ", leading at the end" if incarnation.identity == holder else ", standby at the end"
    if len(incarnation.samples) < 2:
        return life
    (_, rss0, threads0, files0), (_, rss1, threads1, files1) = (
        incarnation.samples[0],
        incarnation.samples[-1],
    )
    return (
        f"{life}; from its start: RSS {rss0:.1f} -> {rss1:.1f} MiB, threads {threads0} -> "
        f"{threads1}, open files {files0} -> {files1}"
    )


def warm_up_seconds(args: argparse.Namespace) -> float:
    return max(120.0, args.minutes * 6.0)


def longest(
    history: list[Incarnation], warmed: float, warm_up: float, holder: str | None
) -> Incarnation | None:
    """The replica process that ran longest (in whole minutes; on a tie, the one leading at
    the end), its samples from the warm-up on (its start or the soak's, whichever came
    later, plus ``warm_up``) to its last."""
    found = []
    for incarnation in history:
        since = max(incarnation.started, warmed) + warm_up
        samples = [s for s in incarnation.samples if s[0] >= since]
        if len(samples) >= 2:
            minutes = int((samples[-1][0] - samples[0][0]) // 60)
            found.append(((minutes, incarnation.identity == holder), samples, incarnation))
    if not found:
        return None
    _, samples, best = max(found, key=lambda entry: entry[0])
    return dataclasses.replace(best, samples=samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pod-interval", type=float, default=2.0, help="seconds between pods")
    parser.add_argument("--bad-fraction", type=float, default=0.2, help="changes that are bad")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--converge-timeout", type=float, default=900.0)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="logs and journals here (default: a temporary directory, kept "
                        "when a bound is broken)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.minutes <= 0:
        parser.error("--nodes must be at least 2 and --minutes above 0")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wcow-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"# soak: {args.nodes} nodes, {args.minutes:g} minutes, seed {args.seed}; "
          f"logs in {workdir}", flush=True)  # fmt: skip
    code = run(args, workdir)
    shutil.rmtree(workdir / "plane", ignore_errors=True)
    if code == 0 and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
