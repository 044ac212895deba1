"""Two operator replicas with leader election on the real Lease, the leader SIGKILLed in the
middle of a paced rollout, on the fault suite's control plane with a simulated fleet:

- while the leader lives, the standby writes nothing (its own ``wcow_api_writes_total``: it
  keeps its caches warm, reads only);
- after the kill, the standby takes the Lease within the Lease period (plus its retry) and
  finishes the rollout; no node applied without permission, never more than maxUnavailable
  at once; the Lease changed hands once (to the standby, acquired after the kill).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import (
    http_status,
    installed_crd,
    metric,
    namespace,
    profiles_cleaned_up,
    wait_for,
)
from tests.faults.conftest import UNCLOSED_ON_KILL, start_change
from tests.faults.harness import lease, replica
from tests.fleet.harness import running_fleet
from tests.fleet.paced import (
    MEMORY,
    apply_windows,
    fleet_summary,
    peak_overlap,
    reached,
    read_rollout,
    until,
)
from wcow_operator.k8s.leader import LEASE_SECONDS
from wcow_operator.rbac import OPERATOR_LEASE

pytestmark = [pytest.mark.e2e, *UNCLOSED_ON_KILL]

NODES = 6
LIMIT = 2


def _acquired(kube: client.ApiClient, ns: str) -> float:
    spec = client.CoordinationV1Api(kube).read_namespaced_lease(OPERATOR_LEASE, ns).spec
    assert spec is not None
    assert spec.acquire_time is not None
    return float(spec.acquire_time.timestamp())


def test_the_leader_killed_mid_rollout_the_standby_takes_over_and_finishes(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv = "faults-failover-hv"
    kubeconfig = plane.kubeconfig
    flags = ("--max-unavailable", str(LIMIT), "--rollout-timeout-seconds", "120")
    with (
        installed_crd(kube),
        namespace(kube, "faults-failover") as ns,
        replica(kubeconfig, ns, "replica-a", tmp_path / "a.log", *flags) as (first, first_port),
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, "faults-l", NODES, canary_seconds=1.5
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        first.until("replica-a to lead", lambda: lease(kube, ns)[0] == "replica-a")
        with replica(kubeconfig, ns, "replica-b", tmp_path / "b.log", *flags) as (
            standby,
            standby_port,
        ):
            paced = start_change(first, fleet, kube, ns, hv)
            view, since, change = paced.view, paced.since, paced.change
            # On a loaded machine the standby may still be starting: its metrics first.
            standby.until(
                "the standby's metrics",
                lambda: http_status(f"http://127.0.0.1:{standby_port}/metrics") == 200,
            )
            standby_writes = metric(standby_port, "wcow_api_writes_total")
            assert standby_writes == 0, "the standby wrote while the leader lived"
            assert metric(first_port, "wcow_api_writes_total") > 0
            first.process.kill()
            killed = time.time()
            # Read at once: nobody can change the rollout until the standby leads (the Lease
            # must expire first).
            rollout = read_rollout(kube, ns)
            assert rollout is not None
            allowed = set(rollout.permitted)
            assert len(allowed) < NODES, "the rollout had finished before the kill"
            assert lease(kube, ns)[0] == "replica-a", "the standby led already"
            wait_for(
                "replica-b to take the Lease",
                lambda: lease(kube, ns)[0] == "replica-b",
                timeout=LEASE_SECONDS * 3,
            )
            # Nothing new is permitted while nobody leads: who began applying before the
            # standby acquired the Lease (its acquireTime; our poll notices a moment later)
            # had permission from the old leader.
            acquired = _acquired(kube, ns)
            during = {w.node for w in apply_windows(fleet.nodes, killed) if w.start < acquired}
            assert during <= allowed, f"applied without permission: {sorted(during - allowed)}"
            until(
                standby,
                "the standby finishing the rollout",
                lambda: reached(view, kube, ns, hv, (MEMORY, 3072)) == change,
                lambda: fleet_summary(view, kube, ns, hv),
            )
            done = time.time()
            windows = apply_windows(fleet.nodes, since)
            assert sorted(w.node for w in windows) == sorted(fleet.nodes), windows
            assert peak_overlap(windows) <= LIMIT, windows
            # One hand-over: the standby holds it, acquired after the kill, and kept it.
            assert lease(kube, ns)[0] == "replica-b"
            assert _acquired(kube, ns) == acquired > killed
            assert metric(standby_port, "wcow_api_writes_total") > 0
            print(
                f"leader SIGKILLed with {len(allowed)}/{NODES} nodes permitted; the standby "
                f"led {acquired - killed:.1f} s later (Lease {LEASE_SECONDS} s), wrote nothing "
                f"before; {len(during)} applied meanwhile; rollout done {done - killed:.1f} s "
                "after the kill"
            )
