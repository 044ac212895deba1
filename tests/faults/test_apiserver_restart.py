"""kube-apiserver SIGKILLed and started again (as in a control plane upgrade), on this
module's own control plane, with the real operator and a simulated fleet:

- during a paced rollout: no node starts applying without the rollout's permission while
  the server is down (the hosts' journals say when each node applied), never more than
  maxUnavailable at once, every node applies the change exactly once, and the rollout
  completes with the same operator and agents, not restarted;
- during a burst of pod creations through the webhook: no pod of a wcow class is stored
  without the webhook's sizing (refused while nothing can judge it, never let through
  unjudged), and once the server is back the pods are admitted and sized, also for a
  profile created after the restart (the operator's caches listed again).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
    windows_pod,
)
from tests.faults.conftest import UNCLOSED_ON_KILL
from tests.faults.pods import Burst, bursting, registered
from tests.fleet.harness import View, running_fleet, running_operator
from tests.fleet.paced import (
    MEMORY,
    apply_windows,
    fleet_summary,
    hyperv_on_every_node,
    new_plan,
    patch_spec,
    peak_overlap,
    reached,
    read_rollout,
    until,
)
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT

pytestmark = [pytest.mark.e2e, *UNCLOSED_ON_KILL]

NODES = 8
LIMIT = 2
OUTAGE_SECONDS = 4.0  # down longer than a node's apply and the agents' 2 s retry


def test_apiserver_killed_mid_rollout_no_node_applies_without_permission(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv = "faults-hv"
    kubeconfig = plane.kubeconfig
    flags = ("--max-unavailable", str(LIMIT), "--rollout-timeout-seconds", "120")
    with (
        installed_crd(kube),
        namespace(kube, "faults-apiserver") as ns,
        running_operator(kubeconfig, ns, tmp_path / "operator.log", *flags) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, "faults-w", NODES, canary_seconds=1.0
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        names = sorted(fleet.nodes)

        def explain() -> str:
            return fleet_summary(view, kube, ns, hv)

        start = hyperv_on_every_node(operator, view, kube, ns, hv)

        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        change = new_plan(operator, kube, ns, start)
        operator.until(
            "the first nodes in their canaries",
            lambda: len(apply_windows(fleet.nodes, since)) >= 1,
        )
        plane.kill("kube-apiserver")
        killed = time.time()
        time.sleep(OUTAGE_SECONDS)
        back = time.time()
        restart_seconds = plane.restart("kube-apiserver")
        # Read before any agent or the operator can write again: what was permitted when
        # the server went down (nothing can be permitted while it is down).
        permitted = read_rollout(kube, ns)
        assert permitted is not None
        assert permitted.plan_hash == change, permitted
        allowed = set(permitted.permitted)
        assert len(allowed) < NODES, "the rollout had finished before the kill"
        during = {w.node for w in apply_windows(fleet.nodes, killed) if w.start <= back}
        assert during <= allowed, f"applied without permission: {sorted(during - allowed)}"

        until(
            operator,
            "the rollout finished after the restart",
            lambda: reached(view, kube, ns, hv, (MEMORY, 3072)) == change,
            explain,
        )
        done = time.time()
        windows = apply_windows(fleet.nodes, since)
        assert sorted(w.node for w in windows) == names, f"not once per node: {windows}"
        assert peak_overlap(windows) <= LIMIT, windows
        assert operator.process.poll() is None
        print(
            f"kube-apiserver down {OUTAGE_SECONDS:.0f} s, ready {restart_seconds:.1f} s after "
            f"its start; {len(allowed)}/{NODES} nodes permitted at the kill, "
            f"{len(during)} applied while it was down; rollout done {done - back:.1f} s after "
            f"the restart, peak {peak_overlap(windows)} applying at once"
        )


def _runtime_class(kube: client.ApiClient, name: str) -> bool:
    try:
        client.NodeV1Api(kube).read_runtime_class(name)
    except ApiException:
        return False
    return True


def _refused(core: client.CoreV1Api, ns: str, body: dict[str, Any]) -> str:
    try:
        core.create_namespaced_pod(ns, body, _request_timeout=15)
    except ApiException as error:
        return str(error.body)
    raise AssertionError(f"pod {body['metadata']['name']} admitted with no webhook to judge it")


def _admitted(core: client.CoreV1Api, ns: str, body: dict[str, Any]) -> Any:
    """The pod once created (None while refused)."""
    try:
        return core.create_namespaced_pod(ns, body, _request_timeout=15)
    except ApiException as error:
        if "failed calling webhook" in str(error.body):
            return None
        raise


def test_apiserver_killed_during_a_burst_of_pods_nothing_admitted_unjudged(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    sized, later = "faults-sized", "faults-later"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    port = free_port()
    webhook = ("--webhook-port", str(port), "--webhook-url", f"https://127.0.0.1:{port}")

    vm = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}
    with (
        installed_crd(kube),
        namespace(kube, "faults-webhook") as operator_ns,
        namespace(kube, "faults-pods") as pods_ns,
        running_operator(
            plane.kubeconfig, operator_ns, tmp_path / "operator.log", *webhook
        ) as operator,
        profiles_cleaned_up(kube, [sized, later]),
    ):
        body = profile(sized, isolation="HyperV", windowsBuild="ltsc2022", vm=vm)
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        operator.until("the webhook registered for the class", lambda: registered(kube, sized))
        wait_for("the default ServiceAccount",
                 lambda: core.read_namespaced_service_account("default", pods_ns))  # fmt: skip

        with bursting(Burst(core, pods_ns, sized), 3) as burst:
            operator.until("pods admitted before the fault", lambda: len(burst.admitted) >= 5)
            plane.kill("kube-apiserver")
            killed = time.time()
            time.sleep(OUTAGE_SECONDS)
            restarted = time.time()
            plane.restart("kube-apiserver")
            back = time.time()
            operator.until(
                "pods admitted after the restart",
                lambda: burst.admitted_since(back) >= 5,
            )
        first_after = min(t for t, _ in burst.admitted if t > killed)
        unjudged = [a for _, a in burst.admitted if a.get(ANNOTATION_PROCESSOR_COUNT) != "3"]
        assert not unjudged, f"admitted without the webhook's sizing: {unjudged[:3]}"
        # Stored: also a pod whose creation was committed as the server died, its answer
        # lost; every one sized all the same.
        stored = core.list_namespaced_pod(pods_ns).items
        assert len(stored) >= len(burst.admitted)
        assert all(
            (p.metadata.annotations or {}).get(ANNOTATION_PROCESSOR_COUNT) == "3" for p in stored
        )
        assert burst.refused, "no creation failed: the server was not down during the burst"

        # A class created after the restart: the operator's caches listed again, so it is
        # registered and judged too.
        body = profile(later, isolation="HyperV", windowsBuild="ltsc2022", vm=vm)
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        operator.until("the webhook registered for the new class", lambda: registered(kube, later))
        # (Kubernetes' RuntimeClass admission refuses a pod of a class not created yet.)
        operator.until(f"RuntimeClass {later}", lambda: _runtime_class(kube, later))
        pod = core.create_namespaced_pod(
            pods_ns, windows_pod("later", later, limits={"cpu": "4", "memory": "1Gi"})
        )
        assert pod.metadata.annotations[ANNOTATION_PROCESSOR_COUNT] == "4"
        assert operator.process.poll() is None

        # No replica to judge: pods of the wcow classes are refused (failurePolicy Fail),
        # other pods pass; a new replica admits them again.
        operator.process.kill()
        operator.process.wait(timeout=10)
        for number in range(3):
            refusal = _refused(core, pods_ns, windows_pod(f"alone-{number}", sized))
            assert "failed calling webhook" in refusal, refusal
        assert core.create_namespaced_pod(pods_ns, windows_pod("plain", None)).metadata.uid
        alone = time.time()
        with running_operator(plane.kubeconfig, operator_ns, tmp_path / "second.log", *webhook):
            sized_pod = windows_pod("again", sized, limits={"cpu": "2", "memory": "1Gi"})
            again = wait_for(
                "a wcow pod admitted by the new replica",
                lambda: _admitted(core, pods_ns, sized_pod),
                timeout=60,
            )
            assert again.metadata.annotations[ANNOTATION_PROCESSOR_COUNT] == "2"
            replaced = time.time() - alone
            # Deleted while a replica runs to remove their finalizer.
            for name in (sized, later):
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            wait_for("the profiles deleted", lambda: not custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL)["items"])  # fmt: skip
        print(
            f"{len(burst.admitted)} pods admitted, all sized; {len(burst.refused)} creations "
            f"failed while kube-apiserver was down or starting; the first pod admitted "
            f"{first_after - restarted:.1f} s after it was started again; with no webhook "
            f"replica 3/3 wcow pods refused, a plain pod admitted; a new replica admitted "
            f"{replaced:.1f} s after its start"
        )
