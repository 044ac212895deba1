"""Objects deleted in the middle of a paced rollout, with the real operator and a simulated
fleet on the fault suite's control plane:

- a Node deleted while its agent applies (its VM scaled away, say): its permission is freed,
  the rollout completes on every other node and counts the nodes that are left, and no more
  than maxUnavailable apply at once;
- a profile deleted while its change rolls out: the plan drops its handler, every node ends
  without its table and its ready label (the removal paced too), and its RuntimeClass goes
  (garbage collection of the owned object).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import GROUP, PLURAL, VERSION, read_plan
from tests.faults.conftest import paced_change
from tests.fleet.paced import MEMORY, applied_hash, apply_windows, peak_overlap, read_rollout, until
from wcow_contract.labels import ready_label

pytestmark = pytest.mark.e2e

NODES = 6
LIMIT = 2
FLAGS = ("--max-unavailable", str(LIMIT), "--rollout-timeout-seconds", "120")


def test_a_node_deleted_while_applying_frees_its_slot_and_the_rest_finish(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    with paced_change(
        plane, kube, tmp_path, "faults-gone-node", NODES, *FLAGS, canary_seconds=2.0
    ) as paced:
        first = apply_windows(paced.fleet.nodes, paced.since)[0].node
        client.CoreV1Api(kube).delete_node(first)
        rest = sorted(set(paced.fleet.nodes) - {first})
        view, hv = paced.view, paced.hv

        def finished() -> bool:
            status = (view.profile(hv) or {}).get("status") or {}
            rollout = read_rollout(kube, paced.ns)
            return (
                all(applied_hash(view, n) == paced.change for n in rest)
                and all(
                    (view.disk_runtimes(n).get(hv) or {}).get("options", {}).get(MEMORY) == 3072
                    for n in rest
                )
                and (status.get("nodes") or {}).get("eligible") == len(rest)
                and rollout is not None
                and first not in rollout.permitted
            )

        until(paced.operator, f"every node but {first} on the change, its slot freed",
              finished, paced.explain)  # fmt: skip
        # The deleted Node's host finishes its step unseen (a real one would be gone); the
        # nodes the rollout still counts never exceed maxUnavailable.
        windows = [w for w in apply_windows(paced.fleet.nodes, paced.since) if w.node != first]
        assert sorted(w.node for w in windows) == rest, windows
        assert peak_overlap(windows) <= LIMIT
        assert paced.operator.process.poll() is None, paced.operator.excerpt()


def test_a_profile_deleted_mid_rollout_leaves_no_table_label_or_class(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    with paced_change(plane, kube, tmp_path, "faults-gone-profile", NODES, *FLAGS) as paced:
        view, hv, nodes = paced.view, paced.hv, paced.fleet.nodes
        client.CustomObjectsApi(kube).delete_cluster_custom_object(GROUP, VERSION, PLURAL, hv)

        def gone_everywhere() -> bool:
            plan = read_plan(kube, paced.ns) or {}
            return (
                hv not in (plan.get("handlers") or {"?": 0})
                and all(hv not in view.disk_runtimes(n) for n in nodes)
                and all(ready_label(hv) not in view.labels(n) for n in nodes)
                and view.runtime_class(hv) is None
            )

        until(paced.operator, f"{hv}'s table, label and RuntimeClass gone", gone_everywhere,
              paced.explain)  # fmt: skip
        assert peak_overlap(apply_windows(nodes, paced.since)) <= LIMIT
        assert paced.operator.process.poll() is None, paced.operator.excerpt()
