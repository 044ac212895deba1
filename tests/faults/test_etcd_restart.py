"""etcd SIGKILLed and started again on the same data, during a paced rollout, on the fault
suite's own control plane, with the real operator (leader election on, as deployed) and a
simulated fleet:

- an outage shorter than the Lease's renew deadline: the operator keeps the Lease (the same
  holder, no second leader: only one replica runs) and is not restarted, no node starts
  applying without the rollout's permission while etcd is down, and the rollout completes
  with the same operator and agents.

An outage longer than the Lease period ends the operator by design (its watchdog exits once
the Lease went unrenewed for LEASE_SECONDS, so a replica that cannot renew never keeps
acting beside a new leader: ``wcow_operator/k8s/leader.py``); not run here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.faults.conftest import UNCLOSED_ON_KILL, paced_change
from tests.fleet.paced import apply_windows, peak_overlap, read_rollout, until
from wcow_operator.k8s.leader import LEASE_SECONDS
from wcow_operator.rbac import OPERATOR_LEASE

pytestmark = [pytest.mark.e2e, *UNCLOSED_ON_KILL]

NODES = 6
LIMIT = 2
OUTAGE_SECONDS = 5.0  # well inside the renew deadline (leader.RENEW_DEADLINE_SECONDS)


def _holder(kube: client.ApiClient, ns: str) -> str | None:
    spec = client.CoordinationV1Api(kube).read_namespaced_lease(OPERATOR_LEASE, ns).spec
    return spec.holder_identity if spec else None


def test_etcd_killed_mid_rollout_the_leader_keeps_its_lease_and_finishes(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    flags = (
        "--max-unavailable", str(LIMIT), "--rollout-timeout-seconds", "120",
        "--leader-election",  # the harness turns it off; production runs with it
    )  # fmt: skip
    with paced_change(plane, kube, tmp_path, "faults-etcd", NODES, *flags) as paced:
        leader = _holder(kube, paced.ns)
        assert leader, "the operator holds no Lease"
        rollout = read_rollout(kube, paced.ns)
        assert rollout is not None
        allowed = set(rollout.permitted)
        plane.kill("etcd")
        killed = time.time()
        time.sleep(OUTAGE_SECONDS)
        restart_seconds = plane.restart("etcd")
        back = time.time()
        # Nothing can be permitted while etcd is down: who applied then had permission before.
        during = {w.node for w in apply_windows(paced.fleet.nodes, killed) if w.start <= back}
        assert during <= allowed, f"applied without permission: {sorted(during - allowed)}"

        until(paced.operator, "the rollout finished after etcd came back", paced.finished,
              paced.explain)  # fmt: skip
        done = time.time()
        windows = apply_windows(paced.fleet.nodes, paced.since)
        assert sorted(w.node for w in windows) == sorted(paced.fleet.nodes), windows
        assert peak_overlap(windows) <= LIMIT, windows
        assert paced.operator.process.poll() is None, paced.operator.excerpt()
        assert _holder(kube, paced.ns) == leader, "the Lease changed hands: a second leader"
        assert "Traceback" not in (tmp_path / "operator.log").read_text(encoding="utf-8")
        print(
            f"etcd down {OUTAGE_SECONDS:.0f} s (Lease {LEASE_SECONDS} s), healthy "
            f"{restart_seconds:.1f} s after its start; {len(allowed)}/{NODES} permitted at the "
            f"kill, {len(during)} applied while it was down; rollout done "
            f"{done - back:.1f} s after, the same leader"
        )
