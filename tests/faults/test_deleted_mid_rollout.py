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

import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    installed_crd,
    namespace,
    profiles_cleaned_up,
    read_plan,
)
from tests.fleet.harness import View, running_fleet, running_operator
from tests.fleet.paced import (
    MEMORY,
    applied_hash,
    apply_windows,
    fleet_summary,
    hyperv_on_every_node,
    new_plan,
    patch_spec,
    peak_overlap,
    read_rollout,
    until,
)
from wcow_contract.labels import ready_label

pytestmark = pytest.mark.e2e

NODES = 6
LIMIT = 2
FLAGS = ("--max-unavailable", str(LIMIT), "--rollout-timeout-seconds", "120")


def test_a_node_deleted_while_applying_frees_its_slot_and_the_rest_finish(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv = "faults-gone-node"
    kubeconfig = plane.kubeconfig
    with (
        installed_crd(kube),
        namespace(kube, "faults-gone-node") as ns,
        running_operator(kubeconfig, ns, tmp_path / "operator.log", *FLAGS) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, "faults-g", NODES, canary_seconds=2.0
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        start = hyperv_on_every_node(operator, view, kube, ns, hv)
        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        change = new_plan(operator, kube, ns, start)
        first = operator.until(
            "a node in its canaries",
            lambda: (w := apply_windows(fleet.nodes, since)) and w[0].node,
        )
        client.CoreV1Api(kube).delete_node(first)
        rest = sorted(set(fleet.nodes) - {first})

        def finished() -> bool:
            body = view.profile(hv) or {}
            status = body.get("status") or {}
            rollout = read_rollout(kube, ns)
            return (
                all(applied_hash(view, n) == change for n in rest)
                and all(
                    (view.disk_runtimes(n).get(hv) or {}).get("options", {}).get(MEMORY) == 3072
                    for n in rest
                )
                and (status.get("nodes") or {}).get("eligible") == len(rest)
                and rollout is not None
                and first not in rollout.permitted
            )

        until(
            operator,
            f"every node but {first} on the change, its slot freed",
            finished,
            lambda: fleet_summary(view, kube, ns, hv),
        )
        # The deleted Node's host finishes its step unseen (a real one would be gone); the
        # nodes the rollout still counts never exceed maxUnavailable.
        windows = [w for w in apply_windows(fleet.nodes, since) if w.node != first]
        assert sorted(w.node for w in windows) == rest, windows
        assert peak_overlap(windows) <= LIMIT
        assert operator.process.poll() is None, operator.excerpt()


def test_a_profile_deleted_mid_rollout_leaves_no_table_label_or_class(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv = "faults-gone-profile"
    kubeconfig = plane.kubeconfig
    with (
        installed_crd(kube),
        namespace(kube, "faults-gone-profile") as ns,
        running_operator(kubeconfig, ns, tmp_path / "operator.log", *FLAGS) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, "faults-p", NODES, canary_seconds=1.0
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        start = hyperv_on_every_node(operator, view, kube, ns, hv)
        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        new_plan(operator, kube, ns, start)
        operator.until(
            "the first nodes in their canaries",
            lambda: len(apply_windows(fleet.nodes, since)) >= 1,
        )
        client.CustomObjectsApi(kube).delete_cluster_custom_object(GROUP, VERSION, PLURAL, hv)

        def gone_everywhere() -> bool:
            plan = read_plan(kube, ns) or {}
            return (
                hv not in (plan.get("handlers") or {"?": 0})
                and all(hv not in view.disk_runtimes(n) for n in fleet.nodes)
                and all(ready_label(hv) not in view.labels(n) for n in fleet.nodes)
                and view.runtime_class(hv) is None
            )

        until(
            operator,
            f"{hv}'s table, label and RuntimeClass gone",
            gone_everywhere,
            lambda: fleet_summary(view, kube, ns, hv),
        )
        assert peak_overlap(apply_windows(fleet.nodes, since)) <= LIMIT
        assert operator.process.poll() is None, operator.excerpt()
