"""A webhook replica restarted as a rolling update restarts it (SIGTERM, then a new process)
while 50 clients create pods of a wcow class, on the fault suite's control plane.

Two replicas (leader election on, both serving the webhook) sit behind the Service stand-in
of ``tests/faults/service_front.py``: the webhook configurations' URL is the front, which
sends each new connection to a replica whose ``/readyz`` said 200 at its last probe (every
second), as kube-proxy does with a Service's ready endpoints. The user notices nothing: no
creation fails, and every stored pod of the class carries the webhook's sizing. What makes it
hold: the terminating replica reports not ready at once, keeps answering for
``--shutdown-delay-seconds`` (the time the endpoints take to drop it) and closes each
connection after its answer meanwhile, so the API server's pooled connections leave it before
it stops (docs/architecture.md, Shutdown).
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    free_port,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    wait_for,
)
from tests.faults.harness import replica
from tests.faults.pods import Burst, bursting, registered
from tests.faults.service_front import Endpoint, ServiceFront
from tests.fleet.harness import Operator
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT

pytestmark = [pytest.mark.e2e]

WORKERS = 50
DRAIN_SECONDS = 5.0  # --shutdown-delay-seconds, the default
VM = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}


def _pooled(kubeconfig: Path, size: int) -> client.ApiClient:
    """A client with ``size`` connections, so ``size`` threads create pods at once."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = size
    return client.ApiClient(configuration)


def _open_before_stop(operator: Operator, endpoint: Endpoint, terminated: float) -> int:
    """The connections the front holds to the replica just before its drain ends (or it
    exits, whichever comes first): those the API server still calls it over as it stops."""
    last = endpoint.open
    while operator.process.poll() is None and time.time() < terminated + DRAIN_SECONDS - 0.3:
        last = endpoint.open
        time.sleep(0.02)
    return last


def test_a_webhook_replica_restarted_under_50_concurrent_creations_none_fails(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    sized = "faults-restart-sized"
    core = client.CoreV1Api(_pooled(plane.kubeconfig, WORKERS))
    first, second = (
        Endpoint(name, free_port(), free_port()) for name in ("replica-a", "replica-b")
    )
    front = ServiceFront([first, second])
    with (
        front.running(),
        installed_crd(kube),
        namespace(kube, "faults-restart") as operator_ns,
        namespace(kube, "faults-restart-pods") as pods_ns,
        contextlib.ExitStack() as replicas,
        profiles_cleaned_up(kube, [sized]),
    ):

        def start(endpoint: Endpoint, log: str) -> Operator:
            url = f"https://127.0.0.1:{front.port}"
            flags = ("--webhook-port", str(endpoint.port), "--webhook-url", url)
            running = replica(
                plane.kubeconfig, operator_ns, endpoint.name, tmp_path / log, *flags,
                health=endpoint.health,
            )  # fmt: skip
            return replicas.enter_context(running)[0]

        body = profile(sized, isolation="HyperV", windowsBuild="ltsc2022", vm=VM)
        client.CustomObjectsApi(kube).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        old, other = start(first, "a.log"), start(second, "b.log")
        old.until("the webhook registered for the class", lambda: registered(kube, sized))
        other.until("both replicas ready behind the front", lambda: first.ready and second.ready)
        wait_for("the default ServiceAccount",
                 lambda: core.read_namespaced_service_account("default", pods_ns))  # fmt: skip

        with bursting(Burst(core, pods_ns, sized, timeout=30), WORKERS) as burst:
            other.until(
                "pods admitted through both replicas",
                lambda: len(burst.admitted) >= 100 and first.connections and second.connections,
            )
            open_at_term = first.open
            old.process.send_signal(signal.SIGTERM)
            terminated = time.time()
            wait_for("the front to drop the terminating replica", lambda: not first.ready)
            dropped = time.time()
            at_stop = _open_before_stop(old, first, terminated)
            code = old.process.wait(timeout=90)
            exited = time.time()
            assert code == 0, old.excerpt()
            served = first.connections
            new = start(first, "a-again.log")
            started = time.time()
            new.until("the new replica ready behind the front", lambda: first.ready, timeout=90)
            back = time.time()
            new.until(
                "pods admitted through the new replica",
                lambda: first.connections > served and burst.admitted_since(back) >= 100,
            )
        refused = list(burst.refused)
        seen = (
            f"{WORKERS} clients: {len(burst.admitted)} pods admitted, {len(refused)} failed; "
            f"{burst.admitted_since(terminated) - burst.admitted_since(exited)} admitted "
            f"between the SIGTERM and the replica's exit; it had {open_at_term} connections "
            f"open at the SIGTERM, left the front {dropped - terminated:.1f} s after it, "
            f"exited {exited - terminated:.1f} s after it, {at_stop} open as it stopped; the new "
            f"replica ready {back - started:.1f} s after its start, "
            f"{burst.admitted_since(back)} admitted since; connections refused by the "
            f"replicas {first.refused}/{second.refused}, with none ready {front.no_endpoint}"
        )
        assert not refused, f"{seen}; the first failures: {refused[:3]}"
        unsized = [a for _, a in burst.admitted if a.get(ANNOTATION_PROCESSOR_COUNT) != "3"]
        assert not unsized, f"admitted without the webhook's sizing: {unsized[:3]}"
        stored = core.list_namespaced_pod(pods_ns).items
        assert len(stored) == len(burst.admitted)
        assert all(
            (p.metadata.annotations or {}).get(ANNOTATION_PROCESSOR_COUNT) == "3" for p in stored
        )
        assert other.process.poll() is None
        print(f"{seen}; every stored pod sized")
