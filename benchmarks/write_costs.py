"""What each write of a converge costs the control plane: CPU milliseconds per write, by
process, for the writes `benchmarks/converge.py` compares.

    .venv/bin/python benchmarks/write_costs.py [--profiles 500]

Runs against the local control plane (started for the duration, `make control-plane`
builds it; its pids file is what lets it count CPU by process). With no operator running,
one client writes one by one, as `kubectl apply` does:

1. creates N profiles (what the user's `kubectl apply` costs, in both sides of converge.py);
2. writes each one's status as the operator's reconcile renders it (computed by `reconcile()`
   over the same documents): a third with the operator's PUT of the status subresource, a
   third with the same PUT of that status cut to two of its eight conditions (`Valid` and
   `Ready`: what the other six, fixed by the design, cost each write), a third with the merge
   patch it sent before this release (for comparison);
3. creates the N RuntimeClasses the operator renders (its other write);
4. deletes them and server-side applies them (the floor of converge.py).

Prints, one line per kind, the wall time and the CPU milliseconds per write of kube-apiserver,
etcd, the controller manager and this client, then the operator side's CPU per profile
(1 + the PUT of 2 + 3) against the floor's (4). Everything it creates is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.converge import cpu_by_process, floor_bodies, rendered_writes, specs
from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import GROUP, PLURAL, VERSION, installed_crd

from wcow_operator.controller.controller import status_update
from wcow_operator.reconcile.model import Write


def measure(kubeconfig: Path, count: int, label: str, writes: Callable[[], None]) -> float:
    """Runs ``writes``; prints its figures; returns the CPU ms per write of all processes."""
    before = cpu_by_process(kubeconfig)
    started = time.perf_counter()
    writes()
    wall = time.perf_counter() - started
    after = cpu_by_process(kubeconfig)
    if before is None or after is None:
        raise SystemExit("needs the local control plane (its pids file): unset KUBECONFIG")
    spent = {name: 1000 * (after[name] - before.get(name, 0.0)) / count for name in after}
    print(
        f"{label:<34} {wall:6.2f} s   CPU ms per write: "
        + ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(spent.items()))
        + f"; all {sum(spent.values()):.2f}",
        flush=True,
    )
    return sum(spent.values())


def two_conditions(status: dict[str, Any]) -> dict[str, Any]:
    """The status with only its Valid and Ready conditions: for comparison only (the design
    fixes eight), to show what the conditions' number costs each status write."""
    kept = [c for c in status["conditions"] if c["type"] in ("Valid", "Ready")]
    return {**status, "conditions": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=500)
    args = parser.parse_args()
    with cluster_kubeconfig() as kubeconfig:
        run(args.profiles, kubeconfig)


def run(count: int, kubeconfig: Path) -> None:
    config.load_kube_config(str(kubeconfig))
    kube = client.ApiClient()
    custom, node = client.CustomObjectsApi(kube), client.NodeV1Api(kube)
    bodies = specs(f"cost-{uuid.uuid4().hex[:6]}", count)
    names = [b["metadata"]["name"] for b in bodies]
    statuses = {n: w["update-status"]["status"] for n, w in rendered_writes(bodies).items()}
    classes = floor_bodies(bodies)
    with installed_crd(kube):
        time.sleep(2)  # the CRD's endpoints settle before the clock
        try:
            created: dict[str, Any] = {}
            create = measure(
                kubeconfig, count, "create profile (the user's apply)",
                lambda: created.update(
                    (body["metadata"]["name"],
                     custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body))
                    for body in bodies
                ),
            )  # fmt: skip
            third = count // 3
            thirds = names[:third], names[third : 2 * third], names[2 * third :]

            def put(status: dict[str, Any], name: str) -> None:
                write = Write("update-status", name, {"status": status}, created[name])
                custom.replace_cluster_custom_object_status(
                    GROUP, VERSION, PLURAL, name, status_update(write)
                )

            status = measure(
                kubeconfig, len(thirds[0]), "PUT status (operator)",
                lambda: [put(statuses[n], n) for n in thirds[0]],
            )  # fmt: skip
            measure(
                kubeconfig, len(thirds[1]), "PUT status, 2 of 8 conditions",
                lambda: [put(two_conditions(statuses[n]), n) for n in thirds[1]],
            )  # fmt: skip
            measure(
                kubeconfig, len(thirds[2]), "merge-patch status (until 3b8e44a)",
                lambda: [
                    custom.patch_cluster_custom_object_status(
                        GROUP, VERSION, PLURAL, n, {"status": statuses[n]}
                    )
                    for n in thirds[2]
                ],
            )  # fmt: skip
            runtime_class = measure(
                kubeconfig, count, "create RuntimeClass (operator)",
                lambda: [node.create_runtime_class(rc) for rc in classes],
            )  # fmt: skip
            for rc in classes:
                node.delete_runtime_class(rc["metadata"]["name"])
            floor = measure(
                kubeconfig, count, "server-side apply RuntimeClass (floor)",
                lambda: [
                    node.patch_runtime_class(
                        rc["metadata"]["name"], rc, field_manager="kubectl", force=True,
                        _content_type="application/apply-patch+yaml",
                    )
                    for rc in classes
                ],
            )  # fmt: skip
        finally:
            for rc in classes:
                with contextlib.suppress(client.ApiException):
                    node.delete_runtime_class(rc["metadata"]["name"])
            for name in names:
                with contextlib.suppress(client.ApiException):
                    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    side = create + status + runtime_class
    print(
        f"operator side per profile (create + status + RuntimeClass): {side:.2f} ms CPU; "
        f"floor {floor:.2f} ms; ratio {side / floor:.2f}"
    )


if __name__ == "__main__":
    main()
