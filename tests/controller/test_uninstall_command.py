"""``wcow-operator uninstall`` against a fake of its API adapter: the order (profiles gone, then
the signal), the bounded wait, the report naming the nodes that are not clean, the signal
taken off after success and kept after a failure."""

from __future__ import annotations

from typing import Any, cast

import pytest

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.k8s.uninstall_api import UninstallApi
from wcow_operator.reconcile.uninstall_decisions import not_clean, with_signal
from wcow_operator.uninstall_command import Deadline, Uninstall, main

SIGNAL = "runtime.wcow.dev/uninstall"
STATUS = "runtime.wcow.dev/agent-status"


def node(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


class FakeApi:
    """Profiles the operator lets go one poll after their deletion; agents that clean their
    node ``clean_after`` polls after the signal (None: never)."""

    def __init__(self, nodes: list[dict[str, Any]], clean_after: int | None = 1) -> None:
        self._profiles = {"hv": "deleting?", "proc": "deleting?"}
        self.deleted: list[str] = []
        self.nodes = nodes
        self.clean_after = clean_after
        self.polls_since_signal: int | None = None
        self.config_map: dict[str, Any] = {
            "metadata": {"name": "wcow-runtime-plan", "resourceVersion": "7", "annotations": {}},
            "data": {"plan.json": "{}"},
        }
        self.writes: list[dict[str, Any]] = []
        self.conflicts = 1
        self.log: list[str] = []
        self.deleted_classes: list[tuple[str, str]] = []

    def profiles(self) -> list[dict[str, Any]]:
        left = [{"metadata": {"name": n}} for n in self._profiles]
        for name in self.deleted:
            self._profiles.pop(name, None)  # the operator drops its finalizer
        return left

    def delete_profile(self, name: str) -> None:
        assert self.polls_since_signal is None, "profiles go before the signal"
        self.deleted.append(name)

    def plan(self, namespace: str) -> dict[str, Any] | None:
        return self.config_map

    def replace_plan(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict", "the operator wrote it meanwhile")
        assert body["data"] == self.config_map["data"], "the plan's bytes never change"
        self.writes.append(body)
        self.config_map = body
        if SIGNAL in body["metadata"]["annotations"]:
            self.polls_since_signal = 0
        return body

    def runtime_classes(self) -> list[dict[str, Any]]:
        owner = {"apiVersion": "runtime.wcow.dev/v1alpha1", "kind": "WindowsRuntimeProfile"}
        return [
            {"metadata": {"name": "hv", "uid": "u1", "ownerReferences": [
                {**owner, "name": "hv", "uid": "p1", "controller": True}]}},
            {"metadata": {"name": "runhcs-wcow-process", "uid": "u2"}},  # not ours
            {"metadata": {"name": "other", "uid": "u3", "ownerReferences": [
                {**owner, "name": "x", "uid": "p3"}]}},  # a reference, not the controller
        ]  # fmt: skip

    def delete_runtime_class(self, name: str, uid: str) -> None:
        self.deleted_classes.append((name, uid))

    def windows_nodes(self, metadata_only: bool = False) -> list[dict[str, Any]]:
        if self.polls_since_signal is not None:
            self.polls_since_signal += 1
            if self.clean_after is not None and self.polls_since_signal > self.clean_after:
                for item in self.nodes:
                    item["metadata"]["labels"] = {"kubernetes.io/os": "windows"}
                    item["metadata"]["annotations"] = {}
        return self.nodes


def dirty(name: str) -> dict[str, Any]:
    return node(
        name,
        {"runtime.wcow.dev/hv": "ready", "node.runtime.wcow.dev/hyperv": "true"},
        {STATUS: "{}"},
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(api: FakeApi, timeout: float, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    clock = Clock()
    command = Uninstall(
        cast(UninstallApi, api), "wcow-system", Deadline(timeout, clock), clock.sleep
    )
    code = command.run()
    return code, capsys.readouterr().out


def test_profiles_go_then_the_signal_then_every_node_is_clean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeApi([dirty("w1"), dirty("w2"), node("w3", {}, {})])
    code, out = run(api, 60, capsys)
    assert code == 0, out
    assert sorted(api.deleted) == ["hv", "proc"]
    # Once the CRD is gone the garbage collector cannot tell their owner is gone: deleted
    # here, only those a profile controls.
    assert api.deleted_classes == [("hv", "u1")]
    assert api.writes[0]["metadata"]["annotations"][SIGNAL]  # after one conflict, read again
    assert SIGNAL not in api.config_map["metadata"]["annotations"], "taken off after success"
    assert "1/3 Windows node(s) clean" in out
    assert "uninstalled: 3 Windows node(s) clean" in out


def test_a_node_left_dirty_is_named_and_the_command_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failed = dirty("w2")
    failed["metadata"]["annotations"]["runtime.wcow.dev/uninstall-error"] = (
        "cannot uninstall: containerd did not come up"
    )
    api = FakeApi([dirty("w1"), failed, node("w3", {}, {})], clean_after=None)
    code, out = run(api, 30, capsys)
    assert code == 1
    assert "2 of 3 Windows node(s) not clean:" in out
    assert "w1: no answer from its agent" in out
    assert "w2: its agent failed: cannot uninstall: containerd did not come up" in out
    assert "wcow-agent uninstall" in out
    assert api.config_map["metadata"]["annotations"][SIGNAL], "kept for agents that come back"


def test_profiles_the_operator_does_not_let_go_fail_before_any_signal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeApi([dirty("w1")])
    api.deleted = []
    api.delete_profile = lambda name: None  # type: ignore[method-assign]
    code, out = run(api, 20, capsys)
    assert code == 1
    assert "profiles still there: hv, proc" in out
    assert "is wcow-operator running?" in out
    assert api.writes == []


def test_a_guest_build_label_a_pool_set_does_not_count() -> None:
    pool = node("w1", {"node.runtime.wcow.dev/guest-build-17763": "true"}, {})
    assert not_clean([pool]) == {}
    assert list(not_clean([dirty("w9")])) == ["w9"]


def test_the_signal_changes_only_the_annotation() -> None:
    config_map = {
        "metadata": {"name": "p", "annotations": {"runtime.wcow.dev/plan-hash": "abc"}},
        "data": {"plan.json": "{}"},
    }
    signalled = with_signal(config_map, "t")
    assert signalled["metadata"]["annotations"] == {
        "runtime.wcow.dev/plan-hash": "abc",
        SIGNAL: "t",
    }
    assert signalled["data"] == config_map["data"]
    assert with_signal(signalled, None)["metadata"]["annotations"] == {
        "runtime.wcow.dev/plan-hash": "abc"
    }


def test_the_timeout_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--timeout", "5", "--namespace", "x"]) == 2
    assert "--timeout must be 10 to 3600 seconds, not 5" in capsys.readouterr().out
