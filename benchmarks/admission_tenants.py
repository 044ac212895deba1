"""One tenant floods the image checks, another creates pods: on the real API server.

The operator serves its webhook with ``--resolve-images`` on the local control plane (or the
cluster KUBECONFIG points at). Tenant B creates pods of a Hyper-V class whose image is on the
test registry (looked up once, then cached); their admission latency, as ``kubectl`` sees it,
is measured quiet, then while tenant A sends a flood of server-side dry runs and real pod
creates naming images on slow registries (servers that send their answer one byte at a time,
never finishing). Printed: B's p50 and p99 quiet and under the flood, their ratio, and how
many of B's pods were refused (the target: p99 within 2x of quiet, none refused).

Run: ``.venv/bin/python benchmarks/admission.py --tenants`` (needs the control plane and
registry binaries: ``make e2e`` builds them).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control_plane import cluster_kubeconfig
from tests.e2e.operator_harness import (
    free_port,
    installed_crd,
    namespace,
    profile,
    running_operator,
    wait_for,
    windows_pod,
)
from tests.images.hostile import dribble, serving
from tests.registry import running

from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION

CLASS = "bench-guest2019"
VICTIM_PODS = 60
FLOOD_RATE = 16.0  # A's requests a second (the review saw 12-20 dry runs a second)
FLOOD_THREADS = 8
SLOW_REGISTRIES = 4


def _pod(name: str, images: list[str]) -> dict[str, Any]:
    body = windows_pod(name, CLASS)
    body["spec"]["containers"] = [
        {"name": f"c{i}", "image": image} for i, image in enumerate(images)
    ]
    return body


def _timed_creates(
    core: client.CoreV1Api, ns: str, image: str, tag: str
) -> tuple[list[float], int]:
    """Create VICTIM_PODS pods one after the other; (latencies in ms, refusals)."""
    took: list[float] = []
    refused = 0
    for n in range(VICTIM_PODS):
        started = time.perf_counter()
        try:
            core.create_namespaced_pod(ns, _pod(f"victim-{tag}-{n}", [image]))
        except ApiException:
            refused += 1
        took.append((time.perf_counter() - started) * 1000)
        time.sleep(0.05)
    return took, refused


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


@contextlib.contextmanager
def _flood(core: client.CoreV1Api, ns: str, slow: list[str]) -> Iterator[dict[str, int]]:
    """Tenant A's flood, FLOOD_RATE requests a second from FLOOD_THREADS threads: dry runs,
    and every fourth a real create, each pod with eight images on the slow registries under
    tags never asked before (nothing cached)."""
    stop = threading.Event()
    counts = {"sent": 0, "refused": 0}
    lock = threading.Lock()
    interval = FLOOD_THREADS / FLOOD_RATE

    def worker(index: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            images = [f"{slow[(i + n) % len(slow)]}/team/app:t{index}-{n}-{i}" for i in range(8)]
            dry = n % 4 != 0
            try:
                core.create_namespaced_pod(
                    ns, _pod(f"flood-{index}-{n}", images), dry_run="All" if dry else None
                )
            except ApiException:
                with lock:
                    counts["refused"] += 1
            with lock:
                counts["sent"] += 1
            stop.wait(interval)

    threads = [
        threading.Thread(target=worker, args=(i,), daemon=True) for i in range(FLOOD_THREADS)
    ]
    for thread in threads:
        thread.start()
    try:
        yield counts
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def run() -> None:
    with (
        cluster_kubeconfig() as kubeconfig,
        tempfile.TemporaryDirectory(prefix="wcow-bench-") as workdir,
        running(Path(workdir) / "registry") as registry,
        contextlib.ExitStack() as stack,
    ):
        api = config.new_client_from_config(str(kubeconfig))
        core = client.CoreV1Api(api)
        slow = [stack.enter_context(serving(dribble)).host for _ in range(SLOW_REGISTRIES)]
        image = registry.reference("wcow/app", "multi")
        old = registry.push_image("wcow/app", "10.0.17763.1234")
        registry.push_index("wcow/app", "multi", [old])
        stack.enter_context(installed_crd(api))
        ops = stack.enter_context(namespace(api, "bench-ops"))
        tenant_a = stack.enter_context(namespace(api, "bench-tenant-a"))
        tenant_b = stack.enter_context(namespace(api, "bench-tenant-b"))
        port = free_port()
        stack.callback(_delete_configurations, api)
        stack.enter_context(running_operator(
            ops, "--webhook-port", str(port), "--webhook-url", f"https://127.0.0.1:{port}",
            "--resolve-images", "--insecure-registry", registry.host,
            *(f"--insecure-registry={h}" for h in slow), "--allowed-registries", "127.0.0.1:*",
        ))  # fmt: skip
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "runtime.wcow.dev", "v1alpha1", "windowsruntimeprofiles",
            profile(CLASS, isolation="HyperV", windowsBuild="ltsc2019"),
        )  # fmt: skip
        stack.callback(_delete_profile, api)
        _wait_registered(api, [tenant_a, tenant_b], core)
        core.create_namespaced_pod(tenant_b, _pod("warm", [image]))  # the image is cached
        quiet, quiet_refused = _timed_creates(core, tenant_b, image, "quiet")
        with _flood(core, tenant_a, slow) as flood:
            time.sleep(2.0)  # the flood at its rate before the victims start
            loaded, loaded_refused = _timed_creates(core, tenant_b, image, "flood")
            sent, refused = flood["sent"], flood["refused"]
        ratio = _p99(loaded) / _p99(quiet)
        print(
            f"tenant B quiet:       p50 {statistics.median(quiet):6.1f} ms  "
            f"p99 {_p99(quiet):6.1f} ms  refused {quiet_refused}/{VICTIM_PODS}"
        )
        print(
            f"tenant B under flood: p50 {statistics.median(loaded):6.1f} ms  "
            f"p99 {_p99(loaded):6.1f} ms  refused {loaded_refused}/{VICTIM_PODS}"
        )
        print(f"p99 ratio (flood / quiet): {ratio:.2f}  (target: at most 2, none refused)")
        print(
            f"tenant A sent {sent} requests ({FLOOD_RATE:g}/s: dry runs, every fourth a real "
            f"create, 8 images each on {SLOW_REGISTRIES} slow registries); {refused} refused"
        )


def _wait_registered(api: Any, namespaces: list[str], core: client.CoreV1Api) -> None:
    registration = client.AdmissionregistrationV1Api(api)

    def registered() -> bool:
        hooks = registration.read_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
        return f'"{CLASS}"' in hooks.webhooks[0].match_conditions[0].expression

    wait_for("the webhook registered for the class", registered, timeout=60)
    for ns in namespaces:
        wait_for(f"{ns}'s ServiceAccount",
                 lambda ns=ns: core.read_namespaced_service_account("default", ns))  # fmt: skip


def _delete_profile(api: Any) -> None:
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            "runtime.wcow.dev", "v1alpha1", "windowsruntimeprofiles", CLASS
        )


def _delete_configurations(api: Any) -> None:
    registration = client.AdmissionregistrationV1Api(api)
    with contextlib.suppress(ApiException):
        registration.delete_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    with contextlib.suppress(ApiException):
        registration.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)


if __name__ == "__main__":
    run()
