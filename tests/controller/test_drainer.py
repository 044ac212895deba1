"""The drainer (``controller.drainer``): the API calls a pass's drain decisions turn into,
against a recording stand-in for the API (the real server: tests/fleet/test_fleet_drain.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.controller.drainer import POLL_SECONDS, Drainer
from wcow_operator.controller.metrics import Metrics
from wcow_operator.reconcile.drain import CORDONED_BY, CORDONED_BY_VALUE, DrainOrder, DrainWork


class Nodes:
    """Nodes and pods as the API server would hold them; evictions a budget refuses."""

    def __init__(self, nodes: dict[str, dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.pods = pods
        self.refuse: set[str] = set()
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.evicted: list[str] = []

    def get_node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise ApiError(404, "NotFound", name)
        return self.nodes[name]

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((name, patch))
        node = self.nodes[name]
        annotations = node["metadata"].setdefault("annotations", {})
        for key, value in patch["metadata"].get("annotations", {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        node["spec"]["unschedulable"] = patch["spec"]["unschedulable"]
        return node

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName") == node]

    def evict_pod(self, namespace: str, name: str) -> str | None:
        if name in self.refuse:
            return "Cannot evict pod as it would violate the pod's disruption budget."
        self.evicted.append(f"{namespace}/{name}")
        for pod in self.pods:
            if pod["metadata"]["name"] == name:
                pod["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
        return None


def node(name: str, *, unschedulable: bool = False, ours: bool = False) -> dict[str, Any]:
    annotations = {CORDONED_BY: CORDONED_BY_VALUE} if ours else {}
    return {
        "metadata": {"name": name, "resourceVersion": "7", "annotations": annotations},
        "spec": {"unschedulable": unschedulable},
    }


def pod(name: str, on: str, runtime_class: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "apps", "name": name, "labels": {}},
        "spec": {"nodeName": on, "runtimeClassName": runtime_class},
        "status": {"phase": "Running"},
    }


def drainer(api: Nodes) -> tuple[Drainer, list[tuple[str, str]], Metrics]:
    events: list[tuple[str, str]] = []
    metrics = Metrics()
    found = Drainer(
        api,  # type: ignore[arg-type]
        metrics,
        wrote_node=lambda _node: None,
        post_event=lambda name, _type, reason, _message: events.append((name, reason)),
    )
    return found, events, metrics


def test_cordon_marks_the_node_as_ours_and_leaves_an_admins_cordon_alone() -> None:
    api = Nodes({"a": node("a"), "b": node("b", unschedulable=True)}, [])
    work, events, _ = drainer(api)
    with ThreadPoolExecutor(2) as pool:
        again = work.run(DrainWork(DrainOrder(mode="Cordon"), drain=("a", "b")), pool)
    assert again == 0.0  # both drained: the next pass at once
    assert [name for name, _ in api.patches] == ["a"]  # b was unschedulable already
    ((_, patch),) = api.patches
    assert patch["spec"] == {"unschedulable": True}
    assert patch["metadata"]["annotations"] == {CORDONED_BY: CORDONED_BY_VALUE}
    assert patch["metadata"]["resourceVersion"] == "7"  # no blind write over a change
    assert events == [("a", "Cordoned")]
    assert work.progress["a"].done
    assert work.progress["b"].done


def test_uncordon_only_what_we_cordoned_and_count_the_drain() -> None:
    api = Nodes({"ours": node("ours", unschedulable=True, ours=True),
                 "theirs": node("theirs", unschedulable=True)}, [])  # fmt: skip
    work, events, metrics = drainer(api)
    with ThreadPoolExecutor(2) as pool:
        work.run(DrainWork(DrainOrder(mode="Cordon"), drain=("ours",)), pool)
        again = work.run(
            DrainWork(DrainOrder(mode="Cordon"), uncordon=("ours", "theirs", "gone")), pool
        )
    assert again is None
    assert api.nodes["ours"]["spec"]["unschedulable"] is None
    assert CORDONED_BY not in api.nodes["ours"]["metadata"]["annotations"]
    assert api.nodes["theirs"]["spec"]["unschedulable"] is True
    assert ("ours", "Uncordoned") in events
    assert metrics.drains.labels(result="drained")._value.get() == 1


def test_evict_asks_again_while_a_budget_refuses_and_waits_for_the_pods_to_go() -> None:
    api = Nodes({"a": node("a")}, [pod("web-0", "a", "hv"), pod("db-0", "a", "other")])
    api.refuse.add("web-0")
    work, _, _ = drainer(api)
    order = DrainOrder(mode="Evict", evict={"hv": None})
    with ThreadPoolExecutor(2) as pool:
        assert work.run(DrainWork(order, drain=("a",)), pool) == POLL_SECONDS
        seen = work.progress["a"]
        assert not seen.done
        assert "apps/web-0" in seen.waiting_for
        assert "disruption budget" in seen.waiting_for
        assert seen.blocking == ("hv",)  # the class its pods belong to: charged with a timeout
        api.refuse.clear()  # the budget allows one now
        work.run(DrainWork(order, drain=("a",)), pool)
        assert api.evicted == ["apps/web-0"]  # db-0 is not of an evicting class
        assert not work.progress["a"].done  # evicted, not gone yet
        api.pods = [p for p in api.pods if p["metadata"]["name"] != "web-0"]  # its kubelet
        assert work.run(DrainWork(order, drain=("a",)), pool) == 0.0
    assert work.progress["a"].done
    assert api.evicted == ["apps/web-0"]  # asked once: a terminating pod is waited for


def test_an_api_error_is_a_reason_to_wait_not_a_crash() -> None:
    api = Nodes({}, [])
    work, _, _ = drainer(api)
    with ThreadPoolExecutor(1) as pool:
        work.run(DrainWork(DrainOrder(mode="Cordon"), drain=("missing",)), pool)
    assert not work.progress["missing"].done
    assert "404" in work.progress["missing"].waiting_for
