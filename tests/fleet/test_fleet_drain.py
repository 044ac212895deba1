"""Drain before a restart (``spec.rollout.drain``) on the real control plane
(``make e2e``): ``wcow-operator``, simulated Windows nodes running the real agent loop, and
real pods bound to them (``spec.nodeName``; no kubelet: the test marks them Ready through the
status subresource, and a stand-in finishes an evicted pod's deletion as a kubelet would).
kube-controller-manager's disruption controller computes the PodDisruptionBudgets' status
that the Eviction API reads.

Judged from outside: the Nodes' ``spec.unschedulable`` as a watch sees it change, the
simulated hosts' journals (when each agent applied), the pods left, the rollout ConfigMap and
the profile's status:

- Cordon: every node is cordoned all the time it applies and uncordoned after, also after a
  failed change; a node someone else cordoned stays cordoned and is never annotated;
- Evict: a PodDisruptionBudget that allows no disruption holds the node in its drain (it does
  not apply, nor does anyone else); relaxed, the pod is evicted and the node applies; pods of
  other classes and pods outside the selector stay;
- a drain that cannot finish within drainTimeoutSeconds is charged to the profile whose pod
  holds it (DrainTimeout, naming the pod and the budget): that profile's change is held back,
  the node is uncordoned, and another profile's change goes on to every node, also after a
  resume that meets the same pod.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
)
from tests.fleet.harness import Operator, View, running_fleet, running_operator
from tests.fleet.paced import (
    BAD_CHANGE,
    MEMORY,
    annotate_resume,
    apply_windows,
    halted,
    new_plan,
    patch_spec,
    reached,
    read_rollout,
)
from wcow_agent.simulator.fleet import Fleet
from wcow_contract.wire.rollout import Rollout
from wcow_operator.reconcile.drain import CORDONED_BY

pytestmark = pytest.mark.e2e

NODES = 4


class Background:
    """A thread of the test's own, stopped and joined on leaving the ``with``."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        raise NotImplementedError


class Cordons(Background):
    """Each node's ``spec.unschedulable`` over time, as a Node watch delivers it."""

    def __init__(self, core: client.CoreV1Api, names: list[str]) -> None:
        super().__init__()
        self.core = core
        self.names = set(names)
        self.changes: dict[str, list[tuple[float, bool]]] = {n: [] for n in names}

    def _run(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.core.list_node, timeout_seconds=5):
                    node = event["object"]
                    name = node.metadata.name
                    if name in self.names:
                        value = bool(node.spec.unschedulable)
                        seen = self.changes[name]
                        if not seen or seen[-1][1] != value:
                            seen.append((time.time(), value))
                    if self._stop.is_set():
                        break
            except (ApiException, OSError):
                time.sleep(0.2)
            finally:
                stream.stop()

    def cordoned_throughout(self, node: str, start: float, end: float) -> bool:
        """Whether the node was unschedulable from before ``start`` to after ``end``."""
        before = [v for t, v in self.changes[node] if t <= start]
        during = [v for t, v in self.changes[node] if start < t <= end]
        return bool(before) and before[-1] and all(during)


class Kubelet(Background):
    """Stands in for the kubelets the control plane has not: finishes the deletion of pods
    that were evicted (a deletionTimestamp), in one namespace."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        super().__init__()
        self.core = core
        self.ns = ns

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                for pod in self.core.list_namespaced_pod(self.ns, _request_timeout=10).items:
                    if pod.metadata.deletion_timestamp is not None:
                        self.core.delete_namespaced_pod(
                            pod.metadata.name, self.ns, grace_period_seconds=0
                        )
            except (ApiException, OSError):
                continue


def running_pod(
    core: client.CoreV1Api, ns: str, name: str, node: str, runtime_class: str | None, **labels: str
) -> None:
    """A pod bound to ``node``, Running and Ready (as its kubelet would report it)."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "app", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}],
        "tolerations": [{"operator": "Exists"}],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status(
        name,
        ns,
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                ],
            }
        },
    )


def pods(core: client.CoreV1Api, ns: str) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(ns).items}


def budget(policy: client.PolicyV1Api, ns: str, name: str, min_available: int) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}},
    }
    try:
        policy.create_namespaced_pod_disruption_budget(ns, body)
    except ApiException as error:
        if error.status != 409:
            raise
        policy.patch_namespaced_pod_disruption_budget(name, ns, body)


def allowed(policy: client.PolicyV1Api, ns: str, name: str) -> int | None:
    """The budget's disruptionsAllowed once the disruption controller has seen its spec."""
    pdb = policy.read_namespaced_pod_disruption_budget(name, ns)
    if pdb.status is None or (pdb.status.observed_generation or 0) < pdb.metadata.generation:
        return None
    return int(pdb.status.disruptions_allowed)


def node_state(view: View, name: str) -> tuple[bool, str | None]:
    body = view.node(name)
    annotations = body["metadata"].get("annotations") or {}
    return bool((body.get("spec") or {}).get("unschedulable")), annotations.get(CORDONED_BY)


def hyperv(name: str, memory: int, **rollout: Any) -> dict[str, Any]:
    return profile(
        name,
        isolation="HyperV",
        windowsBuild="ltsc2022",
        vm={"processorCount": 2, "memoryMB": memory},
        rollout={"maxUnavailable": 1, **rollout},
    )


@contextlib.contextmanager
def drained_fleet(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path, *flags: str
) -> Iterator[tuple[Operator, Fleet, View, str, str, list[str]]]:
    """The operator (``flags``) and NODES simulated nodes, with a HyperV profile on them."""
    hv = f"{prefix}-hv"
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig, ns, tmp_path / "operator.log", "--rollout-timeout-seconds", "120", *flags
        ) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, f"{prefix}w", NODES, canary_seconds=0.5
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        names = sorted(fleet.nodes)
        operator.until(
            "every simulated node's first report",
            lambda: all(view.agent_status(n) is not None for n in names),
        )
        client.CustomObjectsApi(kube).create_cluster_custom_object(
            GROUP, VERSION, PLURAL, hyperv(hv, 2048)
        )
        new_plan(operator, kube, ns, None)
        operator.until(f"{hv} on every node", lambda: reached(view, kube, ns, hv, (MEMORY, 2048)))
        yield operator, fleet, view, ns, hv, names


def test_cordon_while_applying_uncordon_after_success_and_failure_others_cordon_kept(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube)
    with drained_fleet(kube, kubeconfig, prefix, tmp_path, "--drain", "Cordon") as parts:
        operator, fleet, view, ns, hv, names = parts
        theirs = names[-1]  # cordoned by an admin before the change: stays so
        core.patch_node(theirs, {"spec": {"unschedulable": True}})
        first = new_plan(operator, kube, ns, None)
        with Cordons(core, names) as cordons:
            since = time.time()
            patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
            new_plan(operator, kube, ns, first)
            operator.until(
                "3072 MB on every node", lambda: reached(view, kube, ns, hv, (MEMORY, 3072))
            )
            operator.until(
                "every node we cordoned uncordoned",
                lambda: all(node_state(view, n) == (False, None) for n in names[:-1]),
            )
            windows = apply_windows(fleet.nodes, since)
        assert sorted(w.node for w in windows) == names, windows
        for window in windows:
            assert cordons.cordoned_throughout(window.node, window.start, window.end), (
                window,
                cordons.changes[window.node],
            )
        for name in names[:-1]:
            assert [v for _, v in cordons.changes[name]][-2:] == [True, False], name
        assert node_state(view, theirs) == (True, None)  # never annotated, never uncordoned

        # A failing change: the node that fails is uncordoned after its rollback.
        core.patch_node(theirs, {"spec": {"unschedulable": None}})
        before = new_plan(operator, kube, ns, None)
        patch_spec(kube, hv, BAD_CHANGE)
        new_plan(operator, kube, ns, before)
        stop = operator.until(f"{hv} halted", lambda: halted(view, hv))
        assert names[0] in stop["message"], stop["message"]
        operator.until(
            "no node left cordoned after the halt",
            lambda: all(node_state(view, n) == (False, None) for n in names),
        )


def test_evict_waits_for_a_budget_and_a_drain_timeout_holds_back_its_class_only(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    core, policy = client.CoreV1Api(kube), client.PolicyV1Api(kube)
    other = f"{prefix}-other"
    with (
        drained_fleet(kube, kubeconfig, prefix, tmp_path, "--allow-evict") as parts,
        profiles_cleaned_up(kube, [other]),
        namespace(kube, f"{prefix}-apps") as apps,
        Kubelet(core, apps),
    ):
        operator, fleet, view, ns, hv, names = parts
        first_node = names[0]
        operator.until(
            "the default ServiceAccount of the pods' namespace",
            lambda: any(
                s.metadata.name == "default"
                for s in core.list_namespaced_service_account(apps).items
            ),
        )
        running_pod(core, apps, "web-0", first_node, hv, app="web")
        running_pod(core, apps, "kept", first_node, hv, app="kept", keep="yes")  # not selected
        running_pod(core, apps, "linux-ish", first_node, None, app="other")  # no wcow class
        budget(policy, apps, "web", 1)
        operator.until(
            "the budget to allow no disruption", lambda: allowed(policy, apps, "web") == 0
        )

        since = time.time()
        first = new_plan(operator, kube, ns, None)
        patch_spec(
            kube,
            hv,
            {
                "vm": {"memoryMB": 3072},
                "rollout": {
                    "drain": "Evict",
                    "drainTimeoutSeconds": 600,
                    "evictPodSelector": {
                        "matchExpressions": [{"key": "keep", "operator": "DoesNotExist"}]
                    },
                },
            },
        )
        changed = new_plan(operator, kube, ns, first)
        operator.until(
            f"{first_node} draining",
            lambda: (
                (r := read_rollout(kube, ns)) is not None
                and r.plan_hash == changed
                and first_node in r.draining
            ),
        )
        time.sleep(6)  # several drain passes, each refused by the budget
        assert node_state(view, first_node) == (True, "wcow-operator")
        assert "web-0" in pods(core, apps)
        assert apply_windows(fleet.nodes, since) == []  # nobody applied: it is still busy
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.permitted == {}

        budget(policy, apps, "web", 0)  # the budget lets one go: evicted, the node applies
        operator.until("3072 MB on every node", lambda: reached(view, kube, ns, hv, (MEMORY, 3072)))
        assert pods(core, apps) == {"kept", "linux-ish"}
        operator.until(
            "every node uncordoned",
            lambda: all(node_state(view, n) == (False, None) for n in names),
        )
        windows = {w.node: w for w in apply_windows(fleet.nodes, since)}
        assert sorted(windows) == names

        # A drain that cannot finish: the budget blocks again; the timeout holds back the
        # class whose pod blocks it, and nobody else's change.
        client.CustomObjectsApi(kube).create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(other, isolation="Process")
        )
        with_other = new_plan(operator, kube, ns, changed)
        operator.until(f"{other} on every node", lambda: every_node_has(view, other))
        running_pod(core, apps, "web-1", first_node, hv, app="web")
        budget(policy, apps, "web", 1)
        operator.until("the budget to block again", lambda: allowed(policy, apps, "web") == 0)
        patch_spec(kube, hv, {"vm": {"memoryMB": 4096}, "rollout": {"drainTimeoutSeconds": 30}})
        new_plan(operator, kube, ns, with_other)
        stop = operator.until(f"{hv} held back by the drain", lambda: halted(view, hv), timeout=120)
        assert f"{first_node} (DrainTimeout)" in stop["message"], stop["message"]
        assert "held back" in stop["message"], stop["message"]
        # The profile says which pod and which budget held it up; so does the rollout.
        assert f"{apps}/web-1" in stop["message"], stop["message"]
        assert "disruption budget" in stop["message"], stop["message"]
        rollout = read_rollout(kube, ns)
        assert rollout is not None
        assert rollout.halted is None, rollout
        assert set(rollout.held) == {hv}, rollout
        (failure,) = [f for f in rollout.held[hv].nodes if f.node == first_node]
        assert failure.reason == "DrainTimeout"
        assert "not drained within 30 s" in failure.message, failure
        assert "web-1" in pods(core, apps)
        operator.until(
            f"{first_node} uncordoned after the hold",
            lambda: node_state(view, first_node) == (False, None),
        )
        # Another profile's change reaches every node meanwhile, the blocked one included.
        patch_spec(kube, other, {"annotations": {"pod": ["io.microsoft.container.*"]}})
        operator.until(f"{other}'s change on every node", lambda: every_node_has(view, other, 2))
        assert halted(view, other) is None
        # Resumed while the pod stays: held back again, the others untouched.
        annotate_resume(kube, hv, "again")
        operator.until(
            f"{hv} held back again",
            lambda: (
                (r := read_rollout(kube, ns)) is not None
                and r.held.get(hv) is not None
                and r.held[hv].resumed_by == "again"
            ),
            timeout=120,
        )
        assert (read_rollout(kube, ns) or Rollout(plan_hash="", max_unavailable=1)).halted is None


def every_node_has(view: View, handler: str, generation: int = 1) -> bool:
    """Every simulated node reports the handler Ready at this profile generation."""
    for name in view.names:
        entry = ((view.agent_status(name) or {}).get("handlers") or {}).get(handler) or {}
        if (entry.get("state"), entry.get("profileGeneration")) != ("Ready", generation):
            return False
    return True
