"""The operator at fleet size: memory, API load at rest, and how fast a node's report shows.

    .venv/bin/python benchmarks/scale.py [--nodes 5000] [--profiles 500] [--quiet-seconds 60]

Runs against the cluster KUBECONFIG points at, or else starts the project's local control
plane (`make control-plane` builds it). Creates N Windows Node objects of realistic size
(40 images, 4 conditions, addresses, node info and an agent report annotation naming
--handlers-per-node handlers) and M profiles, starts `wcow-operator`, waits until every
profile has a status, and then prints, one per line:

    operator peak RSS: <MiB>                 (VmHWM of the operator process)
    node lists per minute: <count>           (LIST of nodes, full or metadata, in one quiet
                                              minute, from the API server's own
                                              apiserver_request_total)
    node report to status: <seconds>         (median over --changes changes of one node's
                                              agent report until the profile status shows it)
    pass time at rest: <seconds>             (mean reconcile pass in the quiet minute, from
                                              the operator's wcow_reconcile_duration_seconds)

and, for context, every request the API server counted during the quiet minute by verb and
resource. Targets at 5,000 nodes and 500 profiles: RSS < 150 MiB, 0 node lists in a quiet
minute, report to status < 2 s. Everything it creates is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    apiserver_requests,
    installed_crd,
    metric,
    namespace,
    profile,
    running_operator,
    wait_for,
)

from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

BENCH_LABEL = "bench.wcow.dev/run"


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def agent_report(handlers: list[str], failed: str | None = None, note: str = "") -> str:
    entries = {}
    for handler in handlers:
        state = "Failed" if handler == failed else "Ready"
        entries[handler] = {
            "state": state,
            "reason": "CanaryFailed" if state == "Failed" else "CanaryPassed",
            "message": note or f"sandbox started for {handler}",
            "profileGeneration": 1,
            "canaryDurationSeconds": 12.5,
            "lastTransitionTime": "2026-11-01T10:00:00Z",
        }
    return json.dumps(
        {
            "schemaVersion": 1,
            "hostBuild": "10.0.20348",
            "hypervAvailable": True,
            "containerdVersion": "1.7.20",
            "configVersion": 2,
            "appliedPlanHash": "sha256:" + "ab" * 32,
            "updatedAt": "2026-11-01T10:00:00Z",
            "handlers": entries,
        },
        sort_keys=True,
    )


def node_body(name: str, run: str, handlers: list[str]) -> dict[str, Any]:
    """A small Windows node as a kubelet reports it (about 11 KB of JSON)."""
    images = [
        {
            "names": [
                f"mcr.microsoft.com/windows/servercore/app-{i:02d}@sha256:{uuid.uuid4().hex * 2}",
                f"mcr.microsoft.com/windows/servercore/app-{i:02d}:ltsc2022-{i}",
            ],
            "sizeBytes": 2_000_000_000 + i,
        }
        for i in range(40)
    ]
    conditions = [
        {
            "type": kind,
            "status": "True" if kind == "Ready" else "False",
            "reason": f"Kubelet{kind}",
            "message": f"kubelet reports {kind}",
            "lastHeartbeatTime": "2026-11-01T10:00:00Z",
            "lastTransitionTime": "2026-11-01T09:00:00Z",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/os": "windows",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/windows-build": "10.0.20348",
                "node.kubernetes.io/instance-type": "Standard_D4s_v5",
                BENCH_LABEL: run,
                **{f"runtime.wcow.dev/{h}": "ready" for h in handlers},
            },
            "annotations": {AGENT_STATUS_ANNOTATION: agent_report(handlers)},
        },
        "spec": {"podCIDR": "10.244.0.0/24", "providerID": f"azure:///{name}"},
        "status": {
            "images": images,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.4"},
                {"type": "Hostname", "address": name},
            ],
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "10.0.20348.2700",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.33.0",
                "machineID": name,
                "operatingSystem": "windows",
                "osImage": "Windows Server 2022 Datacenter",
                "systemUUID": str(uuid.uuid4()),
            },
        },
    }


def parallel(what: str, call: Callable[[str], Any], names: list[str]) -> None:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(call, names))
    print(f"# {what}: {len(names)} in {time.perf_counter() - started:.1f} s", flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, kube: client.ApiClient) -> None:
        self.args = args
        self.kube = kube
        self.core = client.CoreV1Api(kube)
        self.custom = client.CustomObjectsApi(kube)
        self.run_id = f"scale-{uuid.uuid4().hex[:6]}"
        self.profiles = [f"{self.run_id}-{i:04d}" for i in range(args.profiles)]
        self.reported = self.profiles[: args.handlers_per_node]
        self.nodes = [f"{self.run_id}-win-{i:05d}" for i in range(args.nodes)]

    def status(self, name: str) -> dict[str, Any]:
        body = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        return dict(body.get("status") or {})

    def create_nodes(self) -> None:
        parallel(
            "created Windows nodes",
            lambda n: self.core.create_node(node_body(n, self.run_id, self.reported)),
            self.nodes,
        )
        sample = self.core.read_node(self.nodes[0], _preload_content=False)
        print(f"# one Node object: {len(sample.read()) / 1024:.1f} KiB", flush=True)

    def create_profiles(self) -> None:
        def create(name: str) -> None:
            index = int(name.rsplit("-", 1)[1])
            spec: dict[str, Any] = (
                {"isolation": "Process"}
                if index % 2
                else {"isolation": "HyperV", "windowsBuild": "ltsc2022"}
            )
            self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, profile(name, **spec))

        parallel("created profiles", create, self.profiles)

    def delete_profiles(self) -> None:
        """While the operator runs: it releases the finalizers."""
        for name in self.profiles:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except ApiException as error:
                if error.status != 404:
                    raise
        wait_for(
            "the benchmark's profiles to be deleted",
            lambda: (
                not self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)["items"]
            ),
            timeout=self.args.timeout,
        )

    def converge(self) -> None:
        started = time.perf_counter()

        def counted() -> bool:
            ready = (self.status(self.reported[0]).get("nodes") or {}).get("ready")
            return ready == self.args.nodes and bool(self.status(self.profiles[-1]))

        wait_for("every profile to have a status", counted, timeout=self.args.timeout)
        print(f"# converged in {time.perf_counter() - started:.1f} s", flush=True)
        time.sleep(5)  # let the last status writes land

    def quiet_minute(self, port: int) -> tuple[Counter[tuple[str, str]], float, float]:
        """No change anywhere: what the API server serves, and the passes that run."""
        count, total = (
            "wcow_reconcile_duration_seconds_count",
            "wcow_reconcile_duration_seconds_sum",
        )
        passes_before, seconds_before = metric(port, count), metric(port, total)
        requests_before = apiserver_requests(self.kube)
        time.sleep(self.args.quiet_seconds)
        requests = apiserver_requests(self.kube) - requests_before
        return requests, metric(port, count) - passes_before, metric(port, total) - seconds_before

    def report_to_status(self) -> list[float]:
        """A node's report changes; how long until the profile's status shows it?"""
        delays = []
        target = self.reported[0]
        for change in range(self.args.changes):
            node = self.nodes[(change * 7919) % len(self.nodes)]

            def shows(node: str = node) -> bool:
                failures = self.status(target).get("failures") or []
                return any(f.get("node") == node for f in failures)

            started = time.perf_counter()
            self._report(node, agent_report(self.reported, target, f"change {change}"), None)
            wait_for(f"{target}'s status to show {node}", shows, timeout=60)
            delays.append(time.perf_counter() - started)
            self._report(node, agent_report(self.reported), "ready")
            wait_for("the failure to clear", lambda s=shows: not s(), timeout=60)
        return delays

    def _report(self, node: str, report: str, label: str | None) -> None:
        self.core.patch_node(
            node,
            {
                "metadata": {
                    "annotations": {AGENT_STATUS_ANNOTATION: report},
                    "labels": {f"runtime.wcow.dev/{self.reported[0]}": label},
                }
            },
        )


def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 32
    kube = client.ApiClient(configuration)
    bench = Bench(args, kube)
    with installed_crd(kube), namespace(kube, bench.run_id) as ns:
        try:
            bench.create_nodes()
            bench.create_profiles()
            with running_operator(
                ns, "--log-level", "WARNING", "--resync-seconds", str(args.resync_seconds)
            ) as operator:
                try:
                    bench.converge()
                    requests, passes, pass_seconds = bench.quiet_minute(operator["metrics"])
                    delays = bench.report_to_status()
                    rss = peak_rss_mib(operator["process"].pid)
                finally:
                    bench.delete_profiles()
        finally:
            parallel("deleted nodes", bench.core.delete_node, bench.nodes)

    print(f"nodes: {args.nodes}, profiles: {args.profiles}")
    print(f"operator peak RSS: {rss:.1f}")
    print(f"node lists per minute: {requests[('LIST', 'nodes')] * 60 / args.quiet_seconds:.0f}")
    print(f"node report to status: {statistics.median(delays):.2f}")
    print(f"pass time at rest: {pass_seconds / passes if passes else float('nan'):.3f}")
    print(f"# passes in the quiet {args.quiet_seconds:.0f} s: {passes:.0f}")
    print(f"# report to status, each change: {' '.join(f'{d:.2f}' for d in delays)}")
    print(f"# API requests in the quiet {args.quiet_seconds:.0f} s, by verb and resource:")
    for (verb, resource), count in sorted(requests.items()):
        if count:
            print(f"#   {verb:8} {resource:24} {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--profiles", type=int, default=500)
    parser.add_argument("--handlers-per-node", type=int, default=10)
    parser.add_argument("--quiet-seconds", type=float, default=60)
    parser.add_argument("--resync-seconds", type=float, default=10)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    with cluster_kubeconfig() as kubeconfig:
        run(args, kubeconfig)


if __name__ == "__main__":
    main()
