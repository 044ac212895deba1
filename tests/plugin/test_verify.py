"""``kubectl wcow verify`` (the chart's ``helm test``): per profile one pod of its
RuntimeClass, judged by its status, always deleted; skipped where no node is ready."""

from __future__ import annotations

import itertools
from typing import Any

from tests.plugin import fixtures
from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.plugin import probe, verify

IMAGE = "registry.k8s.io/pause:3.10"


class FakeProber(fixtures.FakeReader):
    """Pods as a kubelet would move them: ``statuses`` per profile, one per read."""

    def __init__(self, statuses: dict[str, list[dict[str, Any]]], refuse: bool = False) -> None:
        super().__init__()
        self.statuses = statuses
        self.refuse = refuse
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:
            raise ApiError(400, "BadRequest", "admission webhook denied the request: VMTooSmall")
        assert namespace == fixtures.NS
        self.pods[body["metadata"]["name"]] = body
        return body

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        body = self.pods[name]
        queue = self.statuses[body["spec"]["runtimeClassName"]]
        status = queue.pop(0) if len(queue) > 1 else queue[0]
        return {**body, **status}

    def delete_pod(self, namespace: str, name: str) -> None:
        self.deleted.append(name)

    def windows_nodes(
        self, name: str | None = None, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        nodes = super().windows_nodes(name, metadata_only=metadata_only)
        for node in nodes:  # w1 is ready for hv (fixtures); w3 for proc
            if node["metadata"]["name"] == "w3":
                node["metadata"]["labels"]["runtime.wcow.dev/proc"] = "ready"
        return nodes


def running(node: str) -> dict[str, Any]:
    container = {"name": "check", "state": {"running": {}}}
    return {
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }


def waiting(reason: str) -> dict[str, Any]:
    container = {"name": "check", "state": {"waiting": {"reason": reason, "message": "nope"}}}
    return {
        "spec": {"nodeName": "w1"},
        "status": {"phase": "Pending", "containerStatuses": [container]},
    }


PENDING: dict[str, Any] = {"status": {"phase": "Pending"}}
NO_NODE = "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity"
UNSCHEDULABLE: dict[str, Any] = {
    "status": {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": NO_NODE},
        ],
    }
}  # fmt: skip


def run(prober: FakeProber, names: tuple[str, ...] = (), deadline: int = 30) -> dict[str, Any]:
    ticks = itertools.count()
    results = probe.run(
        prober, fixtures.NS, IMAGE, deadline, names,
        clock=lambda: float(next(ticks)), sleep=lambda _s: None,
    )  # fmt: skip
    return {r.profile: (r.outcome, r.why) for r in results}


def test_a_pod_of_each_class_runs_on_a_ready_node() -> None:
    prober = FakeProber({"hv": [PENDING, running("w1")], "proc": [running("w3")]})
    assert run(prober) == {
        "hv": ("passed", "a pod of the class ran on w1"),
        "proc": ("passed", "a pod of the class ran on w3"),
    }
    assert sorted(prober.deleted) == sorted(prober.pods)  # every check pod is deleted
    pod = next(iter(prober.pods.values()))
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] == 30
    assert pod["spec"]["containers"] == [{"name": "check", "image": IMAGE}]


def test_failures_say_why_and_the_pod_still_goes() -> None:
    prober = FakeProber({"hv": [waiting("ImagePullBackOff")], "proc": [UNSCHEDULABLE]})
    got = run(prober, deadline=10)
    assert got["hv"] == ("failed", "on w1: ImagePullBackOff: nope")
    assert got["proc"][0] == "failed"
    assert got["proc"][1].startswith("not scheduled within 10 s: 0/5 nodes are available")
    assert len(prober.deleted) == 2


def test_a_pod_nobody_takes_fails_at_the_deadline() -> None:
    got = run(FakeProber({"hv": [PENDING], "proc": [PENDING]}), ("hv",), deadline=5)
    assert got == {"hv": ("failed", "did not start within 5 s (no node took it)")}


def test_no_ready_node_skips_with_the_reason() -> None:
    nodes = fixtures.nodes()
    for node in nodes:
        node["metadata"]["labels"].pop("runtime.wcow.dev/hv", None)
    checks = verify.checks(fixtures.profiles(), nodes)
    assert checks[0].skipped == (
        "no node is ready for handler hv (no Node has the label runtime.wcow.dev/hv=ready): skipped"
    )
    assert checks[1].skipped == (
        "no node is ready for handler proc (no Node has the label runtime.wcow.dev/proc=ready): "
        "skipped"
    )


def test_refused_pods_and_unknown_profiles_fail() -> None:
    got = run(FakeProber({}, refuse=True), ("hv", "nope"))
    assert got["nope"] == ("failed", "no WindowsRuntimeProfile of that name")
    assert got["hv"][0] == "failed"
    assert "VMTooSmall" in got["hv"][1]
    assert "PASS" in probe.render([verify.Result("a", "passed", "ok")])


def test_pod_names_are_valid_for_any_profile_name() -> None:
    check = verify.Check("a" * 63, "a" * 63, "h", ("w1",))
    name = verify.pod_name(check, "n1")
    assert len(name) <= 63
    assert name != verify.pod_name(check, "n2")
