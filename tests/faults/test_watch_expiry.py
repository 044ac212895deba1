"""Watches expired (410 Gone) while profiles change: kube-apiserver SIGKILLed, etcd compacted
to its current revision (as the API server's compactor does every
--etcd-compaction-interval), the server started again. Its watch cache starts at the current
revision and etcd holds nothing older, so every watch the operator and the agents resume
from a version they saw before is answered 410 and must list again. The profile changes
made in that moment, before any watch is back, reach the plan, every node and the
profiles' status; nothing is written twice, and nothing is written at rest afterwards.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    apiserver_requests,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    read_plan,
)
from tests.faults.conftest import UNCLOSED_ON_KILL
from tests.fleet.harness import View, running_fleet, running_operator
from tests.fleet.paced import (
    MEMORY,
    fleet_summary,
    hyperv_on_every_node,
    patch_spec,
    reached,
    until,
)
from wcow_contract.labels import READY_VALUE, ready_label

pytestmark = [pytest.mark.e2e, *UNCLOSED_ON_KILL]

NODES = 3
WRITES = ("POST", "PUT", "PATCH", "APPLY")
OURS = ("configmaps", "nodes", "runtimeclasses", "windowsruntimeprofiles", "events")
REST_SECONDS = 8.0


def writes(counts: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """Creates and updates, by verb and resource, of what the operator and the agents
    write. Not the rest: kube-apiserver renews its own Lease every 10 s, and the namespace
    controller deletes what the earlier fault tests left in their namespaces."""
    return Counter({key: n for key, n in counts.items() if key[0] in WRITES and key[1] in OURS})


def test_changes_made_while_every_watch_expires_all_reach_plan_nodes_and_status(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv, gone, new = "expiry-hv", "expiry-gone", "expiry-new"
    custom = client.CustomObjectsApi(kube)
    with (
        installed_crd(kube),
        namespace(kube, "faults-expiry") as ns,
        running_operator(
            plane.kubeconfig, ns, tmp_path / "operator.log", "--max-unavailable", "100%"
        ) as operator,
        running_fleet(plane.kubeconfig, tmp_path / "fleet", ns, "expiry-w", NODES) as fleet,
        profiles_cleaned_up(kube, [hv, gone, new]),
    ):
        view = View(kube, [fleet])
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(gone, isolation="Process")
        )
        hyperv_on_every_node(operator, view, kube, ns, hv)
        until(
            operator,
            f"{gone} ready on every node",
            lambda: all(view.labels(n).get(ready_label(gone)) == READY_VALUE for n in view.names),
            lambda: fleet_summary(view, kube, ns, hv),
        )
        logged = len(operator.log.read_text().splitlines())

        plane.kill("kube-apiserver")
        revision = plane.compact_etcd()
        plane.restart("kube-apiserver")
        started = time.time()
        # Before the operator's watches are back (it retries after 5 s): a new profile, a
        # change and a deletion, seen only by listing again.
        created = profile(new, isolation="Process")
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, created)
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, gone)

        def converged() -> bool:
            plan = read_plan(kube, ns) or {}
            return (
                set(plan.get("handlers") or {}) == {hv, new}
                and reached(view, kube, ns, hv, (MEMORY, 3072)) is not None
                and all(
                    view.labels(n).get(ready_label(new)) == READY_VALUE
                    and gone not in view.disk_runtimes(n)
                    and ready_label(gone) not in view.labels(n)
                    for n in view.names
                )
                and view.settled(new, NODES, NODES, 0) is not None
                and view.runtime_class(new) is not None
                and view.runtime_class(gone) is None
            )

        until(operator, "every change on every node and in status", converged,
              lambda: fleet_summary(view, kube, ns, hv))  # fmt: skip
        seconds = time.time() - started
        after = operator.log.read_text().splitlines()[logged:]
        expired = {k for k in ("profiles", "plan", "nodes") if any(
            f"watch of {k} expired" in line for line in after)}  # fmt: skip
        assert expired == {"profiles", "plan", "nodes"}, "\n".join(after)

        # Counters start at zero with the restarted server: every write since the fault.
        since_fault = writes(apiserver_requests(kube))
        # The new profile's RuntimeClass created once, not again by a second pass that
        # took the relisted profile for a new one.
        assert since_fault[("POST", "runtimeclasses")] == 1, since_fault
        time.sleep(REST_SECONDS)
        at_rest = writes(apiserver_requests(kube)) - since_fault
        assert not at_rest, f"writes at rest after the relist: {at_rest}"
        print(
            f"etcd compacted to revision {revision}; the operator's watches of "
            f"{', '.join(sorted(expired))} answered 410 and listed again; every change on "
            f"{NODES} nodes and in status {seconds:.1f} s after the restart; writes since "
            f"the fault: {dict(since_fault)}; none in {REST_SECONDS:.0f} s at rest"
        )
