"""How fast the operator converges N profiles, against a floor measured in the same run.

    .venv/bin/python benchmarks/converge.py [--profiles 500] [--quiet-seconds 60]

Runs against the cluster KUBECONFIG points at, or else starts the project's local control
plane (built by `make control-plane`) for the duration.

1. Starts `wcow-operator` (a subprocess, its own namespace), applies N profiles one by one
   (as `kubectl apply -f` of N objects would), and times until every RuntimeClass exists and
   every profile reports Valid=True.
2. The floor: server-side applies the same N RuntimeClasses directly, one by one.
3. Prints the ratio (target <= 2) and the operator's writes per profile, by kind, then
   counts the operator's API writes during a quiet period (target 0, from its
   wcow_api_writes_total metric) and its peak RSS (target < 150 MiB, VmHWM from /proc).
Everything it creates is deleted at the end. Run it on a test cluster with no other
wcow-operator.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

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
from wcow_operator.render.runtimeclass import render_runtime_class


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def specs(prefix: str, count: int) -> list[dict[str, object]]:
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
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    with cluster_kubeconfig() as kubeconfig:
        run(args, kubeconfig)


def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    kube = client.ApiClient()
    custom, node = client.CustomObjectsApi(kube), client.NodeV1Api(kube)
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    bodies = specs(prefix, args.profiles)
    names = [b["metadata"]["name"] for b in bodies]  # type: ignore[index]

    with (
        installed_crd(kube),
        namespace(kube, prefix) as ns,
        running_operator(ns, "--log-level", "WARNING") as operator,
    ):
        try:
            start = time.perf_counter()
            for body in bodies:
                custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

            def converged() -> bool:
                listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
                valid = {
                    p["metadata"]["name"]
                    for p in listed
                    if (condition(p, "Valid") or {}).get("status") == "True"
                }
                classes = {rc.metadata.name for rc in node.list_runtime_class().items}
                return set(names) <= valid and set(names) <= classes

            wait_for(f"{args.profiles} profiles to converge", converged, timeout=args.timeout)
            operator_seconds = time.perf_counter() - start
            passes = metric(operator["metrics"], "wcow_reconcile_duration_seconds_count")
            pass_seconds = metric(operator["metrics"], "wcow_reconcile_duration_seconds_sum")
            writes = metric(operator["metrics"], "wcow_api_writes_total")
            breakdown = writes_by_kind(operator["metrics"])

            floor_start = time.perf_counter()
            for body in bodies:
                rc = render_runtime_class(parse_profile(body))
                rc["metadata"]["name"] = f"floor-{rc['metadata']['name']}"
                node.patch_runtime_class(
                    rc["metadata"]["name"],
                    rc,
                    field_manager="kubectl",
                    force=True,
                    _content_type="application/apply-patch+yaml",
                )
            floor_seconds = time.perf_counter() - floor_start

            writes_before = metric(operator["metrics"], "wcow_api_writes_total")
            time.sleep(args.quiet_seconds)
            quiet_writes = metric(operator["metrics"], "wcow_api_writes_total") - writes_before
            rss = peak_rss_mib(operator["process"].pid)
        finally:
            for name in names:
                for call in (
                    lambda n=name: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n),
                    lambda n=name: node.delete_runtime_class(f"floor-{n}"),
                ):
                    try:
                        call()
                    except ApiException as error:
                        if error.status != 404:
                            raise
            wait_for(
                "the benchmark's profiles to be deleted",
                lambda: (
                    not [
                        p
                        for p in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
                        if p["metadata"]["name"].startswith(prefix)
                    ]
                ),
                timeout=args.timeout,
            )

    print(f"profiles:                      {args.profiles}")
    print(f"operator converge (apply+wait): {operator_seconds:8.2f} s")
    print(f"floor (server-side apply RCs):  {floor_seconds:8.2f} s")
    print(f"ratio operator/floor:           {operator_seconds / floor_seconds:8.2f}   target <= 2")
    print(f"passes until converged:         {passes:8.0f}   ({pass_seconds:.2f} s in passes)")
    print(f"API writes until converged:     {writes:8.0f}")
    print(f"API writes per profile:         {writes / args.profiles:8.2f}")
    for kind, count in breakdown.items():
        print(f"  {kind + ':':<29}{count:8.0f}")
    print(f"API writes in {args.quiet_seconds:.0f} s quiet:      {quiet_writes:8.0f}   target 0")
    print(f"operator peak RSS:              {rss:8.1f} MiB target < 150")


if __name__ == "__main__":
    main()
