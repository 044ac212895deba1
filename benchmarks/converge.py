"""How fast the operator converges N profiles, against a floor measured in the same run.

    .venv/bin/python benchmarks/converge.py [--profiles 500] [--rounds 5] [--quiet-seconds 60]

Runs against the cluster KUBECONFIG points at, or else starts the project's local control
plane (built by `make control-plane`) for the duration.

1. The operator's side. Starts `wcow-operator` (a subprocess, its own namespace) and waits
   until it is ready (its first pass done). The clock starts before the first of N profiles
   is created, one by one (as `kubectl apply -f` of N objects would), and stops at the
   moment the benchmark's own watches (opened before the clock, from a list's version) see
   the last piece of convergence: every RuntimeClass exists and every profile says
   Valid=True with the condition's and the status's observedGeneration equal to its
   metadata.generation. A list afterwards (not timed) must agree. Then the operator's
   writes, by kind, a quiet period (its writes: target 0, from wcow_api_writes_total) and
   its peak RSS (target < 150 MiB, VmHWM from /proc); then the operator is stopped.
2. The floor: the same N RuntimeClasses (rendered before its clock starts) server-side
   applied directly, one by one, with no operator running (a running one would see them
   on its watch and compete for the CPU); once before the sides and once after them
   (other names), and the mean of the two is the round's floor: the host's speed drifts
   (the same floor took 1.0 to 2.0 s within minutes here), and bracketing follows it. Each
   side's objects are deleted, and the garbage collector's deletes waited out, before the
   next step.
3. With ``--writes-alone``, a third side: the operator's writes without the operator. N
   other profiles are created as in 1, and as each one is, its RuntimeClass create and its
   status PUT (the bodies the operator's reconcile renders for it, worked out before the
   clock) go out at once from another process, eight threads, through the operator's own
   client; timed by the same watches. No watch of the operator's, no pass, no plan, no wait:
   the same writes from a client that does nothing else, a reference for what the writes
   themselves cost this cluster (not a strict bound: the operator orders them otherwise,
   the RuntimeClasses of a pass before its statuses, and its batches give the garbage
   collector time to see an owner before its RuntimeClass). It runs before the operator
   side in every other round.
4. Repeats 1 to 3 with new profiles each round (deleted before the next starts),
   ``--rounds`` times: one round on a shared machine can land on another tenant's burst,
   which the median sees through.
5. Prints each round, then the median round's ratio (target <= 2) with the spread, and the
   operator's writes per profile; the quiet period is the last round's.
Everything it creates is deleted at the end. Run it on a test cluster with no other
wcow-operator.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import queue
import re
import sys
import threading
import time
import urllib.request
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    installed_crd,
    metric,
    namespace,
    profile,
    running_operator,
    wait_for,
)

from wcow_contract.errors import parse_profile
from wcow_operator.controller.controller import status_update
from wcow_operator.k8s.kubernetes_api import KubernetesApi
from wcow_operator.reconcile.model import Observed, ObservedProfile, ReconcileSettings, Write
from wcow_operator.reconcile.reconciler import reconcile
from wcow_operator.render.runtimeclass import render_runtime_class

RUNTIME_CLASSES = ("node.k8s.io", "v1", "runtimeclasses")
# The RuntimeClasses of the floor before the operator side and of the floor after it.
FLOOR_PREFIXES = ("floora", "floorb")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(kubeconfig: Path, *pids: int) -> float | None:
    """CPU seconds used so far by the local control plane (the pids file `tests.control_plane`
    writes beside its kubeconfig), the given processes and this one: the work a side costs,
    which the other engineers' load on a shared machine does not change much. None when
    the control plane is not local."""
    split = cpu_by_process(kubeconfig, *pids)
    return None if split is None else sum(split.values())


def cpu_by_process(kubeconfig: Path, *pids: int) -> dict[str, float] | None:
    """CPU seconds so far of each control-plane process (by name), the given processes
    ("operator") and this one ("benchmark")."""
    try:
        lines = (kubeconfig.parent / "pids").read_text().splitlines()
    except FileNotFoundError:
        return None
    named = [(line.split()[0], int(line.split()[1])) for line in lines if line.strip()]
    found = {"benchmark": time.process_time()}
    for name, pid in named + [("operator", pid) for pid in pids]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        ticks = int(fields[11]) + int(fields[12])
        found[name] = found.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    return found


def specs(prefix: str, count: int) -> list[dict[str, Any]]:
    bodies = []
    for index in range(count):
        if index % 2:
            spec = {"isolation": "Process"}
        else:
            spec = {
                "isolation": "HyperV",
                "windowsBuild": "ltsc2022",
                "vm": {"processorCount": 1 + index % 4, "memoryMB": 1024 * (1 + index % 4)},
            }
        bodies.append(profile(f"{prefix}-{index:04d}", **spec))
    return bodies


def writes_by_kind(port: int) -> dict[str, float]:
    """wcow_api_writes_total by "verb resource", from the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("wcow_api_writes_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
            found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return dict(sorted(found.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=500)
    parser.add_argument("--quiet-seconds", type=float, default=60)
    parser.add_argument(
        "--rounds", type=int, default=5, help="floor, the sides, floor: repeated (median)"
    )
    parser.add_argument(
        "--writes-alone",
        action="store_true",
        help="also time the operator's two writes per profile made without the operator",
    )
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    with cluster_kubeconfig() as kubeconfig:
        run(args, kubeconfig)


def current_and_valid(body: dict[str, Any]) -> bool:
    """Valid=True, and both the condition and the status observed the current generation."""
    generation = body["metadata"].get("generation")
    valid = condition(body, "Valid") or {}
    status = body.get("status") or {}
    return (
        valid.get("status") == "True"
        and valid.get("observedGeneration") == generation
        and status.get("observedGeneration") == generation
    )


class Convergence:
    """When the cluster reached convergence, as the benchmark's own watches see it: every
    RuntimeClass exists and every profile says Valid=True for its current generation (the
    condition's and the status's observedGeneration both equal metadata.generation).

    Watching instead of polling a list ends the clock at the event that completed the set
    (a poll ends it up to an interval plus two lists of N objects later) and spares the API
    server N-object lists while the operator works. The watches start from a list taken
    before the clock, so no event is missed."""

    def __init__(self, kube: client.ApiClient, names: list[str]) -> None:
        self._custom = client.CustomObjectsApi(kube)
        self._wanted = set(names)
        self._lock = threading.Condition()
        self._since: dict[tuple[str, str], float] = {}  # (kind, name) -> converged since
        self._stop = threading.Event()
        self._failed: str | None = None
        self._threads = [
            threading.Thread(target=self._watch, args=(kind, *where), daemon=True)
            for kind, where in (("profile", (GROUP, VERSION, PLURAL)), ("class", RUNTIME_CLASSES))
        ]
        self._versions = {
            kind: self._custom.list_cluster_custom_object(*where, limit=1)["metadata"][
                "resourceVersion"
            ]
            for kind, where in (("profile", (GROUP, VERSION, PLURAL)), ("class", RUNTIME_CLASSES))
        }
        for thread in self._threads:
            thread.start()

    def _watch(self, kind: str, group: str, version: str, plural: str) -> None:
        rv = self._versions[kind]
        while not self._stop.is_set():
            response = self._custom.list_cluster_custom_object(
                group, version, plural, watch=True, resource_version=rv,
                allow_watch_bookmarks=True, timeout_seconds=60, _preload_content=False,
            )  # fmt: skip
            try:
                for line in response:
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":  # 410 Gone: the clock must not stop on a guess
                        self.fail(f"the benchmark's watch of {plural} failed: {obj}")
                        return
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._seen(kind, event["type"], obj, time.perf_counter())
            except (ProtocolError, OSError) as error:
                if not self._stop.is_set():  # cut while the clock runs: say so, stop it
                    self.fail(f"the benchmark's watch of {plural} was cut: {error}")
                return  # (at the end: the control plane was stopped under it)

    def fail(self, why: str) -> None:
        """Stop the clock with an error: ``wait`` raises it."""
        with self._lock:
            self._failed = why
            self._lock.notify_all()

    def _seen(self, kind: str, type_: str, obj: dict[str, Any], when: float) -> None:
        name = obj["metadata"]["name"]
        if name not in self._wanted:
            return
        done = type_ != "DELETED" and (kind == "class" or current_and_valid(obj))
        with self._lock:
            if not done:
                self._since.pop((kind, name), None)
            else:
                self._since.setdefault((kind, name), when)
            self._lock.notify_all()

    def wait(self, timeout: float) -> float:
        """The perf_counter time at which the last missing piece arrived."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._since) < 2 * len(self._wanted):
                if self._failed:
                    raise AssertionError(self._failed)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not converged after {timeout} s: {len(self._since)}")
                self._lock.wait(left)
            self._stop.set()
            return max(self._since.values())


def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    kube = client.ApiClient()
    custom, node = client.CustomObjectsApi(kube), client.NodeV1Api(kube)
    rounds: list[dict[str, Any]] = []
    # One namespace for every round: the namespace controller's clean-up of a deleted one
    # (a list of every namespaced kind) would run into the next round.
    with installed_crd(kube), namespace(kube, f"bench-{uuid.uuid4().hex[:6]}") as ns:
        for index in range(args.rounds):
            last = index == args.rounds - 1
            rounds.append(one_round(args, kubeconfig, custom, node, ns, index=index, last=last))
            print(round_line(index, args.profiles, rounds[-1]), flush=True)
    report(args, rounds)


def one_round(
    args: argparse.Namespace,
    kubeconfig: Path,
    custom: client.CustomObjectsApi,
    node: client.NodeV1Api,
    ns: str,
    *,
    index: int,
    last: bool,
) -> dict[str, Any]:
    """The floor, the operator side (and with ``--writes-alone`` the writes alone: first in
    every other round, so neither side always follows the other), the floor again (the floor
    is the mean of the two that bracket the sides). Each side with N profiles of its own,
    deleted, with what the garbage collector deletes after them, before the next step."""
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    bodies = specs(prefix, args.profiles)
    alone = specs(f"{prefix}w", args.profiles) if args.writes_alone else []
    # Rendered before their clocks start; each floor its own names (an apply onto an
    # existing object is cheaper).
    before, after = (floor_bodies(bodies, name) for name in FLOOR_PREFIXES)
    figures: dict[str, Any] = {}

    def operator() -> None:
        with running_operator(ns, "--log-level", "WARNING") as running:
            quiet = args.quiet_seconds if last else 0.0
            figures.update(
                operator_side(args, kubeconfig, custom, bodies, running, quiet_seconds=quiet)
            )

    def writes_alone() -> None:
        figures["alone"] = writes_alone_side(args, kubeconfig, custom, alone)

    sides = [operator, writes_alone] if alone else [operator]
    if index % 2:
        sides.reverse()
    try:
        floors = [timed_floor(node, kubeconfig, before)]
        for side in sides:
            side()
            clean_up(args, custom, prefix)
        floors.append(timed_floor(node, kubeconfig, after))
    finally:
        clean_up(args, custom, prefix)
    figures["floors"] = [seconds for seconds, _ in floors]
    figures["floor_seconds"] = sum(figures["floors"]) / 2
    cpus = [cpu for _, cpu in floors if cpu is not None]
    figures["floor_cpu"] = sum(cpus) / 2 if len(cpus) == 2 else None
    return figures


def timed_floor(
    node: client.NodeV1Api, kubeconfig: Path, rendered: list[dict[str, Any]]
) -> tuple[float, float | None]:
    """One floor: its seconds and its CPU seconds. It runs alone: no operator runs, so none
    of its passes (its RuntimeClass watch would see the floor's writes) competes for it."""
    cpu = cpu_seconds(kubeconfig)
    seconds = floor_side(node, rendered)
    return seconds, _spent(cpu, kubeconfig)


def _spent(before: float | None, kubeconfig: Path, *pids: int) -> float | None:
    after = cpu_seconds(kubeconfig, *pids)
    return None if before is None or after is None else after - before


def operator_side(
    args: argparse.Namespace,
    kubeconfig: Path,
    custom: client.CustomObjectsApi,
    bodies: list[dict[str, Any]],
    operator: dict[str, Any],
    *,
    quiet_seconds: float,
) -> dict[str, Any]:
    """From the first profile created until the watches see the last piece of convergence;
    then the operator's figures, a quiet period (when ``quiet_seconds``) and its peak RSS."""
    names = [body["metadata"]["name"] for body in bodies]
    convergence = Convergence(custom.api_client, names)
    pid = operator["process"].pid
    cpu = cpu_seconds(kubeconfig, pid)
    split = cpu_by_process(kubeconfig, pid)
    start = time.perf_counter()
    for body in bodies:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    created = time.perf_counter()
    end = convergence.wait(args.timeout)
    after = cpu_by_process(kubeconfig, pid)
    figures: dict[str, Any] = {
        "operator_seconds": end - start,
        "created_seconds": created - start,
        "operator_cpu": _spent(cpu, kubeconfig, pid),
        "cpu_split": (
            {name: after[name] - split.get(name, 0.0) for name in after}
            if split is not None and after is not None
            else None
        ),
    }
    # The watches' verdict, checked against a list (not timed).
    listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    valid = {p["metadata"]["name"] for p in listed if current_and_valid(p)}
    classes = custom.list_cluster_custom_object(*RUNTIME_CLASSES)["items"]
    missing = set(names) - valid | set(names) - {rc["metadata"]["name"] for rc in classes}
    assert not missing, f"the watches saw convergence, a list does not: {sorted(missing)[:5]}"
    port = operator["metrics"]
    figures["passes"] = metric(port, "wcow_reconcile_duration_seconds_count")
    figures["pass_seconds"] = metric(port, "wcow_reconcile_duration_seconds_sum")
    figures["writes"] = metric(port, "wcow_api_writes_total")
    figures["breakdown"] = writes_by_kind(port)
    time.sleep(quiet_seconds)
    figures["quiet_writes"] = metric(port, "wcow_api_writes_total") - figures["writes"]
    figures["rss"] = peak_rss_mib(operator["process"].pid)
    return figures


def rendered_writes(bodies: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """For each new profile (generation 1, no node, no plan): the bodies of the writes the
    operator's reconcile makes for it, by kind ("create-runtime-class", "update-status").
    The RuntimeClass's owner reference holds a placeholder uid (``owned_by``)."""
    observed = Observed(
        profiles=[
            ObservedProfile({**b, "metadata": {**b["metadata"], "uid": "u", "generation": 1}})
            for b in bodies
        ],
        runtime_classes={},
        plan=None,
        plan_config_map=None,
        nodes=[],
    )
    outcome = reconcile(observed, ReconcileSettings(namespace="bench"), datetime.now(UTC))
    rendered: dict[str, dict[str, dict[str, Any]]] = {b["metadata"]["name"]: {} for b in bodies}
    for write in outcome.writes:
        if write.target in rendered:  # not the plan's and the rollout's ConfigMaps
            rendered[write.target][write.kind] = write.body
    return rendered


def owned_by(runtime_class: dict[str, Any], uid: str) -> dict[str, Any]:
    """The rendered RuntimeClass with the created profile's uid in its owner reference."""
    metadata = runtime_class["metadata"]
    references = [{**r, "uid": uid} for r in metadata["ownerReferences"]]
    return {**runtime_class, "metadata": {**metadata, "ownerReferences": references}}


def writes_alone_side(
    args: argparse.Namespace,
    kubeconfig: Path,
    custom: client.CustomObjectsApi,
    bodies: list[dict[str, Any]],
) -> dict[str, Any]:
    """From the first profile created until the watches see convergence, with no operator:
    as each profile is created, its RuntimeClass create and then its status PUT go to
    another process (as the operator is one: this one's GIL stays the creating client's),
    which makes them from eight threads (the operator's writers) through the operator's own
    client. A failed write or a dead process stops the clock with its error."""
    names = [body["metadata"]["name"] for body in bodies]
    # A fresh interpreter: none of this process's threads, locks or connections.
    context = multiprocessing.get_context("spawn")
    created_queue: multiprocessing.Queue[tuple[str, str, str] | None] = context.Queue()
    failures: multiprocessing.Queue[str] = context.Queue()
    ready = context.Event()
    writer = context.Process(
        target=alone_writer,
        args=(str(kubeconfig), rendered_writes(bodies), created_queue, failures, ready),
        daemon=True,
    )
    writer.start()
    try:
        if not ready.wait(120):
            raise AssertionError(f"the writes-alone process did not start ({writer.exitcode})")
        convergence = Convergence(custom.api_client, names)
        threading.Thread(
            target=report_writer_failures, args=(writer, failures, convergence), daemon=True
        ).start()
        cpu = cpu_seconds(kubeconfig, writer.pid or 0)
        start = time.perf_counter()
        for body in bodies:
            done = custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            metadata = done["metadata"]
            created_queue.put((metadata["name"], metadata["uid"], metadata["resourceVersion"]))
        created = time.perf_counter()
        end = convergence.wait(args.timeout)
        spent = _spent(cpu, kubeconfig, writer.pid or 0)
    finally:
        created_queue.put(None)
        writer.join(timeout=60)
        if writer.is_alive():  # never left writing into the clean-up
            writer.terminate()
            writer.join()
    return {"seconds": end - start, "created_seconds": created - start, "cpu": spent}


def report_writer_failures(
    writer: multiprocessing.process.BaseProcess,
    failures: multiprocessing.Queue[str],
    convergence: Convergence,
) -> None:
    """Stops the clock as soon as the writes-alone process reports a failed write or dies
    (not a timeout later); returns when it ends as it should."""
    while True:
        try:
            why = failures.get(timeout=0.2)
        except queue.Empty:
            if writer.is_alive():
                continue
            if writer.exitcode != 0:
                convergence.fail(f"the writes-alone process exited with {writer.exitcode}")
            return
        convergence.fail(f"a write of the writes-alone process failed: {why}")
        return


def alone_writer(
    kubeconfig: str,
    rendered: dict[str, dict[str, dict[str, Any]]],
    created_queue: multiprocessing.Queue[tuple[str, str, str] | None],
    failures: multiprocessing.Queue[str],
    ready: multiprocessing.synchronize.Event,
) -> None:
    """The writes-alone process: each created profile's two writes, until None comes."""
    config.load_kube_config(kubeconfig)
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 16  # as the operator's load_client_config
    api = KubernetesApi(client.ApiClient(configuration))

    def write(name: str, uid: str, resource_version: str) -> None:
        observed = {"metadata": {"name": name, "uid": uid, "resourceVersion": resource_version}}
        api.create_runtime_class(owned_by(rendered[name]["create-runtime-class"], uid))
        status = Write("update-status", name, rendered[name]["update-status"], observed=observed)
        api.update_profile_status(name, status_update(status))

    def reported(future: Future[None]) -> None:
        if future.exception() is not None:
            failures.put(repr(future.exception()))

    ready.set()
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="writer") as pool:
        while (item := created_queue.get()) is not None:
            pool.submit(write, *item).add_done_callback(reported)


def floor_bodies(bodies: list[dict[str, Any]], prefix: str = "floor") -> list[dict[str, Any]]:
    """The RuntimeClasses the operator renders for ``bodies``, named PREFIX-*."""
    rendered = []
    for body in bodies:
        rc = render_runtime_class(parse_profile(body))
        rc["metadata"]["name"] = f"{prefix}-{rc['metadata']['name']}"
        rendered.append(rc)
    return rendered


def floor_side(node: client.NodeV1Api, rendered: list[dict[str, Any]]) -> float:
    """Server-side apply of the same RuntimeClasses, one by one (as kubectl apply does)."""
    floor_start = time.perf_counter()
    for rc in rendered:
        node.patch_runtime_class(
            rc["metadata"]["name"],
            rc,
            field_manager="kubectl",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    return time.perf_counter() - floor_start


def clean_up(args: argparse.Namespace, custom: client.CustomObjectsApi, prefix: str) -> None:
    """Delete the round's profiles and RuntimeClasses that exist (their names hold ``prefix``:
    the profiles', the garbage collector's and the floors'); wait until they are gone (the
    garbage collector's 500 deletes would otherwise run into the next step)."""
    kinds = ((GROUP, VERSION, PLURAL), RUNTIME_CLASSES)

    def ours(where: tuple[str, str, str]) -> list[str]:
        items = custom.list_cluster_custom_object(*where)["items"]
        return [i["metadata"]["name"] for i in items if prefix in i["metadata"]["name"]]

    for where in kinds:
        for name in ours(where):
            try:
                custom.delete_cluster_custom_object(*where, name)
            except ApiException as error:
                if error.status != 404:  # the garbage collector may have been first
                    raise
    for where in kinds:
        wait_for(f"the benchmark's {where[2]} to be deleted", lambda w=where: not ours(w),
                 timeout=args.timeout)  # fmt: skip


def ratio(figures: dict[str, Any]) -> float:
    return float(figures["operator_seconds"] / figures["floor_seconds"])


def alone_ratio(figures: dict[str, Any]) -> float:
    return float(figures["alone"]["seconds"] / figures["floor_seconds"])


def round_line(index: int, profiles: int, figures: dict[str, Any]) -> str:
    cpu = ""
    if figures["operator_cpu"] is not None and figures["floor_cpu"] is not None:
        cpu = f", CPU s {figures['operator_cpu']:.2f} / {figures['floor_cpu']:.2f}"
    return (
        f"round {index + 1}: operator {figures['operator_seconds']:.2f} s"
        f" (creating {figures['created_seconds']:.2f}), floor {figures['floor_seconds']:.2f} s"
        f" ({figures['floors'][0]:.2f} before, {figures['floors'][1]:.2f} after),"
        f" ratio {ratio(figures):.2f}{cpu}, {figures['writes'] / profiles:.2f} writes per profile"
        + (alone_line(figures) if "alone" in figures else "")
    )


def alone_line(figures: dict[str, Any]) -> str:
    alone = figures["alone"]
    cpu = f", CPU s {alone['cpu']:.2f}" if alone["cpu"] is not None else ""
    return (
        f"; writes alone {alone['seconds']:.2f} s (creating {alone['created_seconds']:.2f}),"
        f" ratio {alone_ratio(figures):.2f}{cpu}"
    )


def report(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> None:
    """The median round's figures (by ratio), the spread, and what only the last round
    measured (the quiet period)."""
    ranked = sorted(rounds, key=ratio)
    figures = ranked[len(ranked) // 2]
    operator_seconds, floor_seconds = figures["operator_seconds"], figures["floor_seconds"]
    writes = figures["writes"]
    print(f"profiles:                      {args.profiles}")
    print(f"operator converge (apply+wait): {operator_seconds:8.2f} s   (median round)")
    print(f"  of which creating the profiles: {figures['created_seconds']:8.2f} s")
    print(f"floor (server-side apply RCs):  {floor_seconds:8.2f} s")
    print(
        f"ratio operator/floor:           {ratio(figures):8.2f}   target <= 2"
        f"   ({writes / args.profiles:.2f} writes per profile; median of {len(rounds)} rounds,"
        f" {ratio(ranked[0]):.2f} to {ratio(ranked[-1]):.2f})"
    )
    if "alone" in figures:
        alones = sorted(alone_ratio(r) for r in rounds)
        print(
            f"ratio writes alone/floor:       {alones[len(alones) // 2]:8.2f}"
            f"   (the operator's two writes per profile without it: median of {len(rounds)}"
            f" rounds, {alones[0]:.2f} to {alones[-1]:.2f})"
        )
    print(
        f"passes until converged:         {figures['passes']:8.0f}"
        f"   ({figures['pass_seconds']:.2f} s in passes)"
    )
    print(f"API writes until converged:     {writes:8.0f}")
    print(f"API writes per profile:         {writes / args.profiles:8.2f}")
    for kind, count in figures["breakdown"].items():
        print(f"  {kind + ':':<29}{count:8.0f}")
    if figures["operator_cpu"] is not None and figures["floor_cpu"] is not None:
        cpu, floor_cpu = figures["operator_cpu"], figures["floor_cpu"]
        print(
            f"CPU s (control plane, operator, this benchmark): operator side {cpu:.2f},"
            f" floor {floor_cpu:.2f}"
        )
    if figures["cpu_split"] is not None:
        print(
            "  operator side CPU s by process: "
            + ", ".join(f"{name} {cpu:.2f}" for name, cpu in sorted(figures["cpu_split"].items()))
        )
    quiet = rounds[-1]["quiet_writes"]
    print(f"API writes in {args.quiet_seconds:.0f} s quiet:      {quiet:8.0f}   target 0")
    rss = max(r["rss"] for r in rounds)
    print(f"operator peak RSS:              {rss:8.1f} MiB target < 150")


if __name__ == "__main__":
    main()
