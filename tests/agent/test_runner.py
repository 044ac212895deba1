"""``wcow-agent run``'s loop against a fake API server: what it writes to its Node, when it
writes nothing, what it exposes (metrics, probes), how it stops."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import FakeCluster, FakeNode
from wcow_agent.cli import build_parser
from wcow_agent.commands.run_command import install_signal_handlers, prepare_run, serve
from wcow_agent.config.state import load_state
from wcow_agent.loop.agent_loop import AgentLoop
from wcow_agent.loop.cluster import ClusterError, PlanObject, WatchExpiredError
from wcow_agent.loop.cluster_view import RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_support.health import StepHealth

STATUS = "runtime.wcow.dev/agent-status"


def make_loop(node: FakeNode, cluster: FakeCluster, **options: float) -> AgentLoop:
    return AgentLoop(
        node.agent(),
        cluster,
        RunOptions(node_name="win-1", **options),  # type: ignore[arg-type]
        metrics=Metrics(),
        health=StepHealth(),
        stop=threading.Event(),
        now=lambda: "2026-03-02T10:00:00Z",
    )


def sample(loop: AgentLoop, name: str, **labels: str) -> float | None:
    return loop.metrics.registry.get_sample_value(name, labels or None)


def test_first_cycle_labels_ready_handlers_and_writes_the_status_once(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv(), process(), hyperv("hv2025", windowsBuild="ltsc2025")))
    loop = make_loop(node, cluster)

    loop.cycle()

    assert len(cluster.patches) == 1, "labels and status go in one patch"
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"
    assert cluster.labels["runtime.wcow.dev/proc"] == "ready"
    assert "runtime.wcow.dev/hv2025" not in cluster.labels
    status = cluster.status
    assert status["hostBuild"] == "10.0.20348"
    assert status["containerdVersion"] == "1.7.20"
    assert status["configVersion"] == 2
    assert status["appliedPlanHash"] == json.loads(cluster.plan.text or "{}")["hash"]
    assert status["handlers"]["hv2025"]["state"] == "NotEligible"
    assert status["handlers"]["hv2025"]["reason"] == "HostBuildTooOld"
    assert status["handlers"]["hv"]["canaryDurationSeconds"] is not None
    assert loop.health.readiness() == (True, "ok")
    assert sample(loop, "wcow_agent_applies_total", result="applied") == 1
    assert sample(loop, "wcow_agent_containerd_restarts_total", reason="apply") == 1
    assert sample(loop, "wcow_agent_handler_ready", handler="hv") == 1
    assert sample(loop, "wcow_agent_handler_ready", handler="hv2025") == 0
    assert (
        sample(loop, "wcow_agent_canary_duration_seconds_count", handler="hv", result="passed") == 1
    )


def test_a_resync_with_nothing_changed_writes_nothing_to_the_api(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    loop.cycle()
    patches, events, config = len(cluster.patches), len(cluster.events), node.config.read_bytes()

    loop.cycle()
    make_loop(node, cluster).cycle()  # and after an agent restart

    assert len(cluster.patches) == patches
    assert len(cluster.events) == events
    assert node.config.read_bytes() == config
    assert len(node.restarts) == 1


def test_a_profile_deleted_from_the_plan_loses_its_label(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv(), process()))
    loop = make_loop(node, cluster)
    loop.cycle()

    loop.on_plan(cluster.set_plan(make_plan(process())))
    loop.cycle()

    assert "runtime.wcow.dev/hv" not in cluster.labels
    assert cluster.labels["runtime.wcow.dev/proc"] == "ready"
    assert set(cluster.status["handlers"]) == {"proc"}
    assert cluster.patches[-1][1] == {"runtime.wcow.dev/hv": None}
    assert sample(loop, "wcow_agent_handler_ready", handler="hv") is None


def test_a_failed_handler_loses_its_label_and_says_why(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    loop.cycle()
    node.faults.refuse = lambda text: "bad options" if text and "8192" in text else None

    loop.on_plan(cluster.set_plan(make_plan(hyperv(vm={"memoryMB": 8192}))))
    loop.cycle()

    assert "runtime.wcow.dev/hv" not in cluster.labels
    handler = cluster.status["handlers"]["hv"]
    assert handler["state"] == "Failed"
    assert handler["reason"] == "ContainerdRolledBack"
    assert "bad options" in handler["message"]
    assert handler["lastTransitionTime"] == "2026-03-02T10:00:00Z"
    assert any(
        reason == "ContainerdRollback" and warning for _, reason, _, warning in cluster.events
    )
    assert sample(loop, "wcow_agent_rollbacks_total") == 1


def test_the_handler_state_metric_tells_a_failed_handler_from_one_the_host_cannot_run(
    node: FakeNode, cluster: FakeCluster
) -> None:
    """handler_ready is 0 for both; the alert on handlers not ready reads the state (only
    the current one has a series)."""
    cluster.set_plan(make_plan(hyperv(), hyperv("hv2025", windowsBuild="ltsc2025")))
    loop = make_loop(node, cluster)
    loop.cycle()
    assert (
        sample(loop, "wcow_agent_handler_state", handler="hv", state="Ready", reason="CanaryPassed")
        == 1
    )
    not_eligible = {"handler": "hv2025", "state": "NotEligible", "reason": "HostBuildTooOld"}
    assert sample(loop, "wcow_agent_handler_state", **not_eligible) == 1
    node.faults.refuse = lambda text: "bad options" if text and "8192" in text else None

    loop.on_plan(cluster.set_plan(make_plan(hyperv(vm={"memoryMB": 8192}))))
    loop.cycle()

    failed = {"handler": "hv", "state": "Failed", "reason": "ContainerdRolledBack"}
    assert sample(loop, "wcow_agent_handler_state", **failed) == 1
    assert (
        sample(loop, "wcow_agent_handler_state", handler="hv", state="Ready", reason="CanaryPassed")
        is None
    )
    assert sample(loop, "wcow_agent_handler_state", **not_eligible) is None  # left the plan


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (PlanObject(exists=False), "does not exist"),
        (PlanObject(exists=True, text=None), "has no key plan.json"),
        (PlanObject(exists=True, text='{"kind": "RuntimePlan"}'), "schemaVersion"),
    ],
    ids=["missing", "no-key", "bad-plan"],
)
def test_an_unusable_plan_changes_nothing_on_the_node(
    node: FakeNode, cluster: FakeCluster, plan: PlanObject, why: str
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    loop.cycle()
    config = node.config.read_bytes()
    loop.on_plan(plan)

    loop.cycle()

    assert node.config.read_bytes() == config
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready", "labels are kept"
    assert cluster.status["handlers"]["hv"]["state"] == "Ready"
    assert any(
        reason == "PlanUnusable" and why in message for _, reason, message, _ in cluster.events
    )
    assert sample(loop, "wcow_agent_plan_errors_total") == 1


def test_canary_on_demand_through_a_node_annotation(node: FakeNode, cluster: FakeCluster) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    loop.cycle()
    runs = sum(1 for call in node.crictl_calls if "runp" in call)

    cluster.node["annotations"]["runtime.wcow.dev/canary-request"] = "2026-03-02T11:00"
    loop.cycle()
    loop.cycle()  # the same request is served once

    assert sum(1 for call in node.crictl_calls if "runp" in call) == runs + 1
    state, _ = load_state(node.root / "config.toml.wcow-state.json")
    assert state.canary_request == "2026-03-02T11:00"


def test_without_its_node_the_agent_still_applies_and_is_not_ready(
    node: FakeNode, cluster: FakeCluster
) -> None:
    def unreachable(name: str) -> None:
        raise ClusterError("reading Node win-1: 403 Forbidden", 403)

    cluster.get_node = unreachable  # type: ignore[assignment,method-assign]
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)

    loop.cycle()

    assert node.running_text == node.disk_text()
    assert cluster.patches == []
    ready, why = loop.health.readiness()
    assert not ready
    assert "could not be read" in why
    assert sample(loop, "wcow_agent_cluster_errors_total") == 1


def test_the_watch_relists_after_410_and_backs_off_on_errors(
    cluster: FakeCluster, node: FakeNode
) -> None:
    loop = make_loop(node, cluster)
    outcomes: list[object] = [WatchExpiredError("too old", 410), ClusterError("connection refused")]
    calls: list[str | None] = []

    def watch(namespace: str, resource_version: str | None, timeout: int) -> Iterator[PlanObject]:
        calls.append(resource_version)
        if outcomes:
            raise outcomes.pop(0)  # type: ignore[misc]
        loop.stop.set()
        yield PlanObject(True, "{}", "200")

    cluster.watch_plan = watch  # type: ignore[assignment,method-assign]
    cluster.set_plan(make_plan(hyperv()))
    loop.stop.wait = lambda timeout=None: False  # type: ignore[method-assign]  # no real backoff sleep

    loop.watch_forever()

    assert len(cluster.plan_reads) == 3, "listed at start, after 410 and after the error"
    assert calls[0] == cluster.plan.resource_version
    assert sample(loop, "wcow_agent_cluster_errors_total") == 1
    assert loop.wake.is_set()


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_run_serves_metrics_and_probes_follows_the_plan_and_stops_cleanly(
    node: FakeNode, cluster: FakeCluster
) -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--config",
            str(node.config),
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--drift-check-seconds",
            "0.05",
        ]
    )
    cluster.set_plan(make_plan(hyperv()))
    stop = threading.Event()
    loop = prepare_run(
        args, {"NODE_NAME": "win-1"}, lambda a, s: node.host(), lambda: cluster, stop
    )
    assert isinstance(loop, AgentLoop)
    thread = threading.Thread(target=serve, args=(args, loop))
    thread.start()
    try:
        wait_for(lambda: cluster.labels.get("runtime.wcow.dev/hv") == "ready")
        wait_for(lambda: bool(loop.ports))
        health = f"http://127.0.0.1:{loop.ports['health']}"
        assert get(health + "/healthz") == (200, "ok\n")
        assert get(health + "/readyz") == (200, "ok\n")
        assert get(health + "/other")[0] == 404
        code, metrics = get(f"http://127.0.0.1:{loop.ports['metrics']}/metrics")
        assert code == 200
        assert 'wcow_agent_applies_total{result="applied"} 1.0' in metrics
        assert 'wcow_agent_handler_ready{handler="hv"} 1.0' in metrics

        # A new plan arrives through the watch: applied without waiting for the resync.
        new_plan = cluster.set_plan(make_plan(hyperv(), process()))
        cluster.watch_queue.put(new_plan)
        wait_for(lambda: cluster.labels.get("runtime.wcow.dev/proc") == "ready")

        # Someone rewrites config.toml: noticed by the drift check, repaired.
        node.config.write_text(
            node.config.read_text().split(
                '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hv]'
            )[0]
        )
        wait_for(lambda: sample(loop, "wcow_agent_drift_repairs_total") == 2)  # hv and proc
        assert "runtimes.hv]" in node.config.read_text()
    finally:
        stop.set()
        loop.wake.set()
        thread.join(timeout=20)
    assert not thread.is_alive(), "the loop did not stop"
    assert loop.health.readiness() == (False, "shutting down")
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{loop.ports['health']}/healthz", timeout=2)
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{loop.ports['metrics']}/metrics", timeout=2)


def test_run_needs_its_node_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "--config", str(tmp_path / "config.toml")])
    code = prepare_run(args, {}, lambda a, s: None, lambda: None, threading.Event())  # type: ignore[arg-type,return-value]
    assert code == 2
    assert "NODE_NAME is not set" in capsys.readouterr().err


def test_run_refuses_to_touch_a_linux_host(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from wcow_agent.commands.options import real_host

    args = build_parser().parse_args(["run", "--config", str(tmp_path / "config.toml")])
    code = prepare_run(args, {"NODE_NAME": "n"}, real_host, lambda: None, threading.Event())  # type: ignore[arg-type,return-value]
    assert code == 2
    assert "Windows node" in capsys.readouterr().err


def test_stop_signals_end_the_loop() -> None:
    stop, wake = threading.Event(), threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        install_signal_handlers(stop, wake)
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(stop.is_set, 5)
        assert wake.is_set()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def test_liveness_fails_only_past_a_steps_own_bound() -> None:
    now = [0.0]
    health = StepHealth(clock=lambda: now[0])
    assert health.readiness()[0] is False
    health.busy(600)  # a canary may take its timeout
    now[0] = 600
    assert health.liveness() == (True, "ok")
    now[0] = 700
    assert health.liveness()[0] is False
    health.idle(ready=True)
    assert health.liveness() == (True, "ok")
    assert health.readiness() == (True, "ok")


def test_an_unexpected_error_in_a_cycle_does_not_stop_the_agent(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster, retry_seconds=0.01, drift_check_seconds=0.01)
    real = loop.agent.reconcile
    calls: list[int] = []

    def flaky(plan: Any, force_canary: bool = False, pace: Any = None, node: Any = None) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return real(plan, force_canary, pace, node)

    loop.agent.reconcile = flaky  # type: ignore[method-assign]
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        wait_for(lambda: cluster.labels.get("runtime.wcow.dev/hv") == "ready")
    finally:
        loop.stop.set()
        loop.wake.set()
        thread.join(timeout=20)
    assert sample(loop, "wcow_agent_applies_total", result="error") == 1
    assert not thread.is_alive()


class PatchRefused(FakeCluster):
    """The API server goes away between the agent's read of its Node and its report."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = True

    def patch_node(self, name: str, labels: Any, annotations: Any) -> None:
        if self.refuse:
            raise ClusterError("patching Node win-1: Connection refused")
        super().patch_node(name, labels, annotations)


def test_a_report_the_api_server_did_not_take_is_retried_soon_not_at_the_resync(
    node: FakeNode,
) -> None:
    """An apply done while the API server restarted: the report is tried again after
    retry_seconds (the operator waits for it to let the next nodes in), not 5 minutes
    later at the resync."""
    cluster = PatchRefused()
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    report = loop.cycle()
    assert report.result == "applied"
    assert report.requeue, "a lost report waits for the resync"
    assert loop.health.readiness()[0] is False
    cluster.refuse = False
    loop.cycle()
    assert cluster.status["appliedPlanHash"] == json.loads(cluster.plan.text or "{}")["hash"]
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"


def test_the_node_carries_what_the_host_found_as_capability_labels(
    node: FakeNode, cluster: FakeCluster
) -> None:
    """node.runtime.wcow.dev/hyperv and /containerd-line, in the cycle's one patch, and kept
    current: a containerd upgrade changes the line label at the next cycle, nothing else."""
    cluster.set_plan(make_plan(process()))
    loop = make_loop(node, cluster)
    loop.cycle()
    assert cluster.labels["node.runtime.wcow.dev/hyperv"] == "true"
    assert cluster.labels["node.runtime.wcow.dev/containerd-line"] == "1.7"
    assert len(cluster.patches) == 1

    node.containerd_version = "2.1.3"
    loop.cycle()
    assert cluster.labels["node.runtime.wcow.dev/containerd-line"] == "2.1"
    assert cluster.patches[-1][1] == {"node.runtime.wcow.dev/containerd-line": "2.1"}


def test_a_host_without_hyperv_says_false(tmp_path: Path, cluster: FakeCluster) -> None:
    node = FakeNode(tmp_path, hyperv=False)
    cluster.set_plan(make_plan(process()))
    make_loop(node, cluster).cycle()
    assert cluster.labels["node.runtime.wcow.dev/hyperv"] == "false"


def test_a_node_it_cannot_read_leaves_classes_that_select_nodes_as_they_are(
    node: FakeNode, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which classes a node applies depends on its labels: while the Node cannot be read,
    a plan whose profiles select nodes changes nothing on the host (no write, no restart),
    and the loop tries again soon."""
    pooled = hyperv("pooled")
    pooled["spec"]["scheduling"] = {"nodeSelector": {"pool.example.com/name": "b"}}
    cluster.node["labels"]["pool.example.com/name"] = "b"
    cluster.set_plan(make_plan(hyperv(), pooled))
    loop = make_loop(node, cluster)
    loop.cycle()
    assert cluster.labels["runtime.wcow.dev/pooled"] == "ready"
    before = node.config.read_text(encoding="utf-8")

    def unreadable(name: str) -> Any:
        raise ClusterError("the API server is restarting")

    monkeypatch.setattr(cluster, "get_node", unreadable)
    cluster.node["labels"]["pool.example.com/name"] = "a"
    loop.on_plan(cluster.set_plan(make_plan(hyperv(), pooled, process())))
    report = loop.cycle()
    assert (report.result, report.requeue, report.handlers) == ("failed", True, None)
    assert node.config.read_text(encoding="utf-8") == before
    assert "NodeUnreadable" in [reason for reason, _, _ in report.events]

    monkeypatch.undo()
    report = loop.cycle()  # readable again: the label now says pool a
    assert "pooled" not in (report.handlers or {})
    assert "runtime.wcow.dev/pooled" not in cluster.labels
    assert cluster.labels["runtime.wcow.dev/proc"] == "ready"
