"""The controller against a fake API at its boundary: whole passes, as a user sees them."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import profile_document
from tests.controller.builders import NAMESPACE
from tests.controller.fake_api import FakeApi, RelistingCache
from tests.controller.virtual_clock import VirtualClock
from wcow_contract.wire.plan import PLAN_KEY
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP, ROLLOUT_KEY, Rollout, parse_rollout
from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.controller import Controller, PassReport, PlanReader
from wcow_operator.controller.metrics import Metrics
from wcow_operator.controller.runner import (
    HAND_OVER_CEILING_SECONDS,
    HAND_OVER_DELIVERIES_PER_SECOND,
    HAND_OVER_FLOOR_SECONDS,
    Runner,
    hand_over_spacing,
)
from wcow_operator.manager.reconcile_loop import Reconciler
from wcow_operator.reconcile.drain import CORDONED_BY, CORDONED_BY_VALUE
from wcow_operator.reconcile.model import FINALIZER, ReconcileSettings
from wcow_support.retry import Backoff


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def controller(api: FakeApi) -> Controller:
    return Controller(
        api,
        RelistingCache(api, NAMESPACE),
        ReconcileSettings(namespace=NAMESPACE),
        Metrics(),
        clock=lambda: datetime(2026, 3, 1, tzinfo=UTC),
        workers=2,
        instance="test",
    )


def settle(controller: Controller, passes: int = 5) -> None:
    for _ in range(passes):
        report = controller.run_pass()
        if not report.errors and report.writes == 0:
            return
    raise AssertionError("did not converge")


def condition(api: FakeApi, name: str, type_: str) -> dict[str, Any]:
    return next(c for c in api.profiles[name]["status"]["conditions"] if c["type"] == type_)


def reasons(api: FakeApi) -> list[str]:
    return [e["reason"] for e in api.events]


def test_create_converges_and_then_stays_quiet(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv", vm={"memoryMB": 2048}))
    api.apply_profile(profile_document("proc", isolation="Process"))
    settle(controller)
    assert set(api.runtime_classes) == {"hv", "proc"}
    assert (
        api.runtime_classes["hv"]["metadata"]["ownerReferences"][0]["uid"]
        == (api.profiles["hv"]["metadata"]["uid"])
    )
    plan = api.plan()
    assert plan is not None
    assert set(plan["handlers"]) == {"hv", "proc"}
    assert FINALIZER not in (api.profiles["hv"]["metadata"].get("finalizers") or [])
    assert condition(api, "hv", "Valid")["status"] == "True"
    assert api.profiles["hv"]["status"]["runtimeClassName"] == "hv"

    api.calls.clear()
    events = len(api.events)
    for _ in range(3):
        controller.run_pass()
    assert api.writes() == []  # resync with nothing changed: reads only
    assert len(api.events) == events


def test_one_plan_write_for_a_batch_of_profiles(api: FakeApi, controller: Controller) -> None:
    for index in range(25):
        api.apply_profile(profile_document(f"p{index}", isolation="Process"))
    versions = []
    real = api.create_config_map

    def create(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        versions.append(body["metadata"]["name"])
        return real(namespace, body)

    api.create_config_map = create  # type: ignore[method-assign]
    controller.run_pass()
    # One plan write (and the rollout that permits it), not one per profile.
    assert sorted(versions) == ["wcow-runtime-plan", "wcow-runtime-rollout"]
    assert api.calls.count("replace_config_map") == 0
    assert len(api.plan()["handlers"]) == 25  # type: ignore[index]


def test_update_replaces_the_runtime_class(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    api.apply_profile(profile_document("hv", overhead={"podFixed": {"memory": "1Gi"}}))
    settle(controller)
    assert api.runtime_classes["hv"]["overhead"] == {"podFixed": {"memory": "1Gi"}}
    assert api.profiles["hv"]["status"]["observedGeneration"] == 2
    assert "RuntimeClassUpdated" in reasons(api)


def test_handler_change_replaces_the_runtime_class_safely(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    api.apply_profile(profile_document("hv", handler="hv-v2"))
    settle(controller)
    assert api.runtime_classes["hv"]["handler"] == "hv-v2"
    assert set(api.plan()["handlers"]) == {"hv-v2"}  # type: ignore[index]
    replaced = [e for e in api.events if e["reason"] == "RuntimeClassReplaced"]
    assert "from hv to hv-v2" in replaced[0]["message"]


def test_invalid_then_valid(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv", vm={"memoryMB": 2048}))
    settle(controller)
    good_rc = copy.deepcopy(api.runtime_classes["hv"])
    good_plan = api.plan()
    api.apply_profile(profile_document("hv", vm={"memoryMB": 2049}))
    settle(controller)
    assert api.runtime_classes["hv"] == good_rc
    assert api.plan() == good_plan
    valid = condition(api, "hv", "Valid")
    assert valid["status"] == "False"
    assert "spec.vm.memoryMB" in valid["message"]
    warning = next(e for e in api.events if e["type"] == "Warning")
    assert warning["reason"] == "InvalidSpec"
    assert warning["involvedObject"]["name"] == "hv"

    api.apply_profile(profile_document("hv", vm={"memoryMB": 4096}))
    settle(controller)
    assert condition(api, "hv", "Valid")["status"] == "True"
    assert api.plan()["handlers"]["hv"]["vm"]["memoryMB"] == 4096  # type: ignore[index]


def test_hand_edited_and_deleted_runtime_class_is_restored(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    want = copy.deepcopy(api.runtime_classes["hv"])
    api.runtime_classes["hv"]["scheduling"]["nodeSelector"] = {"kubernetes.io/os": "windows"}
    api.runtime_classes["hv"]["metadata"]["resourceVersion"] = "999"
    settle(controller)
    assert api.runtime_classes["hv"]["scheduling"] == want["scheduling"]
    assert "RuntimeClassRestored" in reasons(api)

    del api.runtime_classes["hv"]
    settle(controller)
    assert api.runtime_classes["hv"]["handler"] == "hv"


def test_foreign_runtime_class_is_never_taken_over(api: FakeApi, controller: Controller) -> None:
    api.runtime_classes["hv"] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "handler": "mine",
        "metadata": {"name": "hv", "uid": "foreign", "resourceVersion": "5"},
    }
    api.apply_profile(profile_document("hv"))
    settle(controller)
    assert api.runtime_classes["hv"]["handler"] == "mine"
    assert condition(api, "hv", "RuntimeClassReady")["reason"] == "RuntimeClassConflict"
    assert "RuntimeClassConflict" in reasons(api)


def test_a_deleted_profile_goes_at_once_and_leaves_the_plan(
    api: FakeApi, controller: Controller
) -> None:
    """No finalizer holds it: the next pass writes the plan without its entry. Its
    RuntimeClass is the garbage collector's, by its controller reference (this fake has no
    collector; the e2e tests see it go on a real control plane)."""
    api.apply_profile(profile_document("hv"))
    api.apply_profile(profile_document("keep"))
    settle(controller)
    api.delete_profile("hv")
    assert "hv" not in api.profiles
    settle(controller)
    assert set(api.plan()["handlers"]) == {"keep"}  # type: ignore[index]
    assert "delete_runtime_class" not in api.calls


def with_legacy_finalizer(name: str) -> dict[str, Any]:
    """A profile as earlier versions left it: carrying the operator's finalizer."""
    document = profile_document(name)
    document["metadata"]["finalizers"] = [FINALIZER]
    return document


def test_a_profile_with_the_earlier_finalizer_is_let_go_after_the_plan(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(with_legacy_finalizer("hv"))
    api.apply_profile(profile_document("keep"))
    settle(controller)
    assert api.profiles["hv"]["metadata"]["finalizers"] == [FINALIZER], "not touched while live"
    api.delete_profile("hv")
    assert "hv" in api.profiles  # held by the finalizer
    settle(controller)
    assert "hv" not in api.profiles
    assert "hv" not in api.runtime_classes
    assert set(api.plan()["handlers"]) == {"keep"}  # type: ignore[index]


def test_plan_write_failure_blocks_finalizer_and_warns(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(with_legacy_finalizer("hv"))
    settle(controller)
    api.delete_profile("hv")
    api.fail("replace_config_map", 500, times=2)
    report = controller.run_pass()
    assert report.errors
    assert "hv" in api.profiles  # the finalizer stays while the plan still names it
    assert "hv" in api.plan()["handlers"]  # type: ignore[index]
    blocked = [e for e in api.events if e["reason"] == "CleanupBlocked"]
    assert "kubectl patch wrp hv" in blocked[0]["message"]
    controller.run_pass()  # still failing
    settle(controller)
    assert "hv" not in api.profiles
    assert api.plan()["handlers"] == {}  # type: ignore[index]


def test_conflict_409_is_resolved_by_reading_again(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv"))
    api.fail("create_runtime_class", 409)
    api.fail("update_profile_status", 409)
    report = controller.run_pass()
    # A status refused for a changed profile is no error: it is written again, next pass.
    assert len(report.errors) == 1
    assert report.errors[0].startswith("create-runtime-class hv")
    assert report.superseded == 1
    settle(controller)
    assert api.runtime_classes["hv"]["handler"] == "hv"
    assert condition(api, "hv", "RuntimeClassReady")["status"] == "True"
    assert list(api.runtime_classes) == ["hv"]  # no duplicates


class EditedMeanwhileApi(FakeApi):
    """A user edits the profile's spec between the pass's read and its status write."""

    def __init__(self) -> None:
        super().__init__()
        self.edits = 1

    def update_profile_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.edits:
            self.edits -= 1
            self.apply_profile(profile_document(name, isolation="Process"))
        return super().update_profile_status(name, body)


def test_a_status_computed_from_an_older_version_is_refused_and_written_from_the_new() -> None:
    api = EditedMeanwhileApi()
    api.apply_profile(profile_document("hv"))
    controller = Controller(
        api, RelistingCache(api, NAMESPACE), ReconcileSettings(namespace=NAMESPACE), Metrics()
    )
    report = controller.run_pass()
    assert report.errors == []  # a race with a user's edit is not an error
    assert report.superseded == 1
    assert "status" not in api.profiles["hv"]  # nothing written from the old spec
    settle(controller)
    stored = api.profiles["hv"]
    assert stored["status"]["observedGeneration"] == stored["metadata"]["generation"] == 2
    assert api.runtime_classes["hv"]["handler"] == "hv"


def test_no_pass_before_every_watch_has_listed(api: FakeApi) -> None:
    """A profile not listed yet would look deleted: the runner waits for the whole cache."""
    api.apply_profile(profile_document("hv"))
    cache = ClusterCache()
    controller = Controller(api, cache, ReconcileSettings(namespace=NAMESPACE), Metrics())
    clock = VirtualClock()
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=0.01, clock=clock)

    def all_but_the_profiles() -> None:
        cache.replace("runtimeclasses", [])
        cache.replace("plan", [])
        cache.replace("rollout", [])
        cache.replace("nodes", [])

    def the_profiles() -> None:
        assert api.calls == []  # profiles not listed yet: no pass, no write
        cache.replace("profiles", copy.deepcopy(list(api.profiles.values())))

    drive(
        runner,
        [
            (0.0, all_but_the_profiles),
            (0.3, the_profiles),
            (3.3, lambda: _check("hv" in api.runtime_classes)),
        ],
    )


def test_metrics_after_a_pass(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    registry = controller.metrics.registry
    assert registry.get_sample_value("wcow_runtimeclasses_managed") == 1
    assert registry.get_sample_value("wcow_profiles", {"condition": "Valid", "status": "True"}) == 1
    # kstatus's two conditions are counted too: with no Windows node, the gated profile
    # needs a person (Stalled, NoEligibleNodes) and nothing is under way.
    stalled = {"condition": "Stalled", "status": "True"}
    reconciling = {"condition": "Reconciling", "status": "True"}
    assert registry.get_sample_value("wcow_profiles", stalled) == 1
    assert registry.get_sample_value("wcow_profiles", reconciling) == 0
    assert registry.get_sample_value("wcow_plan_handlers") == 1
    assert (registry.get_sample_value("wcow_plan_size_bytes") or 0) > 100
    assert (registry.get_sample_value("wcow_reconcile_total", {"result": "success"}) or 0) >= 1


def test_runner_passes_on_trigger_and_stops(api: FakeApi, controller: Controller) -> None:
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=0.01)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    try:
        api.apply_profile(profile_document("hv"))
        runner.trigger()
        for _ in range(200):
            if "hv" in api.runtime_classes:
                break
            stop.wait(0.01)
        assert "hv" in api.runtime_classes
    finally:
        stop.set()
        runner.trigger()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_bug_in_one_write_does_not_stop_the_others(
    api: FakeApi, controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.apply_profile(profile_document("a"))
    api.apply_profile(profile_document("b"))

    def broken(body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["name"] == "a":
            raise KeyError("resourceVersion")
        return FakeApi.create_runtime_class(api, body)

    monkeypatch.setattr(api, "create_runtime_class", broken)
    report = controller.run_pass()
    assert any("create-runtime-class a" in e for e in report.errors)
    assert "b" in api.runtime_classes
    assert api.plan() is not None


def test_a_failing_pass_is_reported_not_raised(
    api: FakeApi, controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: str) -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(controller.cache, "observe", explode)
    report = controller.run_pass()
    assert report.errors == ["reconcile failed: RuntimeError('boom')"]


def test_a_runtime_class_the_server_refuses_is_reported_not_claimed(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(profile_document("hv"))
    api.fail("create_runtime_class", 422, times=10)
    controller.run_pass()
    ready = condition(api, "hv", "RuntimeClassReady")
    assert ready["status"] == "False"
    assert ready["reason"] == "RuntimeClassWriteFailed"
    assert "create_runtime_class failed" in ready["message"]
    assert condition(api, "hv", "Ready")["reason"] == "RuntimeClassWriteFailed"
    assert "runtimeClassName" not in api.profiles["hv"]["status"]

    api.calls.clear()
    controller.run_pass()  # still refused: one attempt, and nothing else written
    assert api.writes() == ["create_runtime_class"]
    assert all(e["involvedObject"]["name"] == "hv" for e in api.events)


def test_an_event_is_posted_only_for_a_write_that_succeeded(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    api.apply_profile(profile_document("hv", overhead={"podFixed": {"memory": "600Mi"}}))
    api.fail("replace_runtime_class", 500, times=1)
    controller.run_pass()
    written = {"RuntimeClassUpdated", "RuntimeClassRestored"}
    assert not written & set(reasons(api))
    settle(controller)
    assert written & set(reasons(api))


def test_events_about_profiles_are_posted_in_default(api: FakeApi, controller: Controller) -> None:
    api.apply_profile(profile_document("hv"))
    settle(controller)
    api.apply_profile(profile_document("hv", overhead={"podFixed": {"memory": "600Mi"}}))
    settle(controller)
    assert api.events
    assert {e["metadata"]["namespace"] for e in api.events} == {"default"}


# -- the reconciler thread as main runs it, on a virtual clock ---------------------------


def _check(condition: bool) -> None:
    assert condition


def drive(runner: Runner, steps: list[tuple[float, Callable[[], object]]]) -> None:
    """The runner in this thread on its ``VirtualClock``, each step at its time on that clock
    (a step's failed assert fails the test), stopped after the last step."""
    clock = runner.clock
    assert isinstance(clock, VirtualClock)
    stop = threading.Event()
    for when, step in steps:
        clock.at(when, step)
    clock.at(max(when for when, _ in steps), lambda: (stop.set(), runner.trigger()))
    runner.run(stop)


def test_no_pass_before_the_lease_and_a_stop_ends_the_wait(controller: Controller) -> None:
    clock = VirtualClock()
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=0.01, clock=clock)
    elected, leading, stopping = threading.Event(), threading.Event(), threading.Event()
    reconciler = Reconciler(runner, elected, leading, stopping)
    seen: list[tuple[bool, float | None]] = []
    clock.at(0.3, lambda: (seen.append((leading.is_set(), runner.last_pass_ok)), reconciler.stop()))
    reconciler.run()  # returns: the stop ended its wait for the Lease
    [(led, last_pass_ok)] = seen
    assert not led
    assert last_pass_ok is None
    assert runner.controller.metrics.registry.get_sample_value("wcow_leader") == 0


def test_once_elected_it_leads_passes_and_stops_with_its_pool_closed(
    api: FakeApi, controller: Controller
) -> None:
    api.apply_profile(profile_document("hv"))
    clock = VirtualClock()
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=0.01, clock=clock)
    elected, leading, stopping = threading.Event(), threading.Event(), threading.Event()
    reconciler = Reconciler(runner, elected, leading, stopping)
    seen: list[tuple[float | None, bool, float | None]] = []
    metrics = runner.controller.metrics.registry

    def after_the_first_pass() -> None:
        seen.append(
            (runner.last_pass_ok, leading.is_set(), metrics.get_sample_value("wcow_leader"))
        )
        reconciler.stop()

    clock.at(0.0, elected.set)
    clock.at(5.0, after_the_first_pass)
    reconciler.run()
    [(last_pass_ok, led, leader)] = seen
    assert last_pass_ok is not None
    assert led
    assert leader == 1
    with pytest.raises(RuntimeError, match="shutdown"):  # no write can start after
        runner.controller._pool.submit(int)


def test_failed_passes_back_off_and_a_good_one_resets_the_delay(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=0.01, clock=clock)
    outcomes = iter([["x"], ["x"], ["x"], [], ["x"]])
    stop = threading.Event()

    def run_pass() -> PassReport:
        errors = next(outcomes, None)
        if errors is None:
            stop.set()
            return PassReport()
        runner.trigger()  # the next pass at once, so only the backoff waits
        return PassReport(errors=list(errors))

    monkeypatch.setattr(runner.controller, "run_pass", run_pass)
    runner.backoff = Backoff(initial=1, maximum=3)
    runner.run(stop)
    waits = [t for event, t in clock.waits if event is stop and t is not None and t >= 1]
    assert waits == [1, 2, 3, 1]


def windows_node(name: str, plan: str | None = None, state: str = "Pending") -> dict[str, Any]:
    """A Windows Node whose agent applied ``plan`` (state Ready), or attempted it."""
    status = {
        "hostBuild": "10.0.20348",
        "hypervAvailable": True,
        "appliedPlanHash": plan if state == "Ready" else None,
        "attemptedPlanHash": plan,
        "handlers": {"hv": {"state": state, "reason": f"R{state}", "profileGeneration": 1}},
    }
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/os": "windows",
                "node.kubernetes.io/windows-build": "10.0.20348",
            },
            "annotations": {"runtime.wcow.dev/agent-status": json.dumps(status)},
        }
    }


def rollout_of(api: FakeApi) -> Rollout:
    found = parse_rollout(api.config_maps[(NAMESPACE, ROLLOUT_CONFIGMAP)]["data"][ROLLOUT_KEY])
    assert found is not None
    return found


def three_nodes_rolling_out(api: FakeApi, controller: Controller) -> str:
    """A profile on three Windows nodes, converged: n0 let in (10% of 3: one at a time).
    Returns the plan's hash."""
    api.nodes = [windows_node(f"n{i}") for i in range(3)]
    api.apply_profile(profile_document("hv"))
    settle(controller)
    assert list(rollout_of(api).permitted) == ["n0"]
    return str((api.plan() or {})["hash"])


def after_the_first_pass(
    runner: Runner, steps: list[tuple[float, Callable[[], object]]]
) -> list[tuple[float, Callable[[], object]]]:
    """``steps`` timed from just after the runner's first pass (a pass takes no time on the
    virtual clock: it runs when the debounce from the start ends)."""
    start = runner.debounce_seconds + 0.01
    return [(start, lambda: _check(runner.last_pass_ok is not None))] + [
        (start + offset, step) for offset, step in steps
    ]


def test_a_node_done_hands_its_slot_over_at_once_with_one_write(
    api: FakeApi, controller: Controller, caplog: pytest.LogCaptureFixture
) -> None:
    plan = three_nodes_rolling_out(api, controller)
    api.nodes[0] = windows_node("n0", plan, "Ready")
    api.calls.clear()
    controller.hand_over()
    assert api.writes() == ["replace_config_map"]  # the rollout only: statuses wait for the pass
    assert sorted(rollout_of(api).permitted) == ["n0", "n1"]
    api.calls.clear()
    controller.hand_over()
    assert api.writes() == []  # nothing new: nothing written
    settle(controller)
    assert "replace_config_map" not in api.writes()  # the pass agrees with the hand-over
    # A failure halts in the pass, not in a hand-over, and the operator's log says so once:
    # the failing handler is held back (it never rolled out: out of the plan).
    api.nodes[1] = windows_node("n1", plan, "Failed")
    api.calls.clear()
    with caplog.at_level("WARNING", logger="wcow_operator.controller.controller"):
        controller.hand_over()
        assert api.writes() == []
        assert rollout_of(api).halted is None
        settle(controller)
        controller.hand_over()
    halts = [r.getMessage() for r in caplog.records if "halted" in r.getMessage()]
    assert len(halts) == 1, halts
    assert "n1 (RFailed)" in halts[0]
    assert "held back: handler hv" in halts[0]
    assert rollout_of(api).halted is None
    assert rollout_of(api).held["hv"].entry is None
    assert "hv" not in (api.plan() or {})["handlers"]


def test_the_runner_hands_over_before_the_debounced_pass(
    api: FakeApi, controller: Controller
) -> None:
    plan = three_nodes_rolling_out(api, controller)
    runner = Runner(controller, resync_seconds=3600, debounce_seconds=2.0, clock=VirtualClock())

    def n0_done() -> None:
        api.calls.clear()
        api.nodes[0] = windows_node("n0", plan, "Ready")
        runner.reported()

    def handed_over() -> None:
        assert "n1" in rollout_of(api).permitted  # within 1.5 s: not after the 2 s debounce
        assert "update_profile_status" not in api.writes()  # the pass has not run yet

    steps = [
        (0.1, n0_done),
        (0.1 + 1.49, handed_over),
        (0.1 + 5.0, lambda: _check("update_profile_status" in api.writes())),
    ]
    drive(runner, after_the_first_pass(runner, steps))


def test_hand_overs_are_spaced_so_nodes_finishing_together_share_one_write(
    api: FakeApi, controller: Controller
) -> None:
    """Every rollout write reaches every agent's watch: a second report within
    ``hand_over_seconds`` of a hand-over waits for it (still before the debounced pass)."""
    plan = three_nodes_rolling_out(api, controller)
    runner = Runner(
        controller, resync_seconds=3600, debounce_seconds=3.0, hand_over_seconds=1.0,
        clock=VirtualClock(),
    )  # fmt: skip

    def n0_done() -> None:
        api.calls.clear()
        api.nodes[0] = windows_node("n0", plan, "Ready")
        runner.reported()

    def n1_done() -> None:
        assert "n1" in rollout_of(api).permitted  # within 0.8 s
        api.nodes[1] = windows_node("n1", plan, "Ready")
        runner.reported()

    def n2_in() -> None:
        assert "n2" in rollout_of(api).permitted  # within 1.5 s
        assert api.writes().count("replace_config_map") == 2
        assert "update_profile_status" not in api.writes()  # both before the pass

    steps = [
        (0.1, n0_done),
        (0.11, n1_done),
        (0.51, lambda: _check("n2" not in rollout_of(api).permitted)),  # spaced: not yet
        (0.11 + 1.49, n2_in),
    ]
    drive(runner, after_the_first_pass(runner, steps))


def test_a_report_that_frees_no_slot_does_not_hold_back_the_next_hand_over(
    api: FakeApi, controller: Controller
) -> None:
    """A node recording its attempt changes its report but no decision: nothing is written,
    so the report that follows (a node done) is handed over at once, not ``hand_over_seconds``
    after it."""
    plan = three_nodes_rolling_out(api, controller)
    runner = Runner(
        controller, resync_seconds=3600, debounce_seconds=3.0, hand_over_seconds=2.0,
        clock=VirtualClock(),
    )  # fmt: skip

    def n0_attempted() -> None:
        api.calls.clear()
        api.nodes[0] = windows_node("n0", plan)  # attempted: still applying
        runner.reported()

    def n0_done() -> None:
        assert api.writes() == []
        api.nodes[0] = windows_node("n0", plan, "Ready")
        runner.reported()

    steps = [
        (0.1, n0_attempted),
        (0.3, n0_done),
        # within 1.5 s: not held back by the attempt's report
        (0.3 + 1.49, lambda: _check("n1" in rollout_of(api).permitted)),
    ]
    drive(runner, after_the_first_pass(runner, steps))


class TimedApi(FakeApi):
    """Every write takes ``seconds``; ``spans`` records (write, target, start, end)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.spans: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def _timed(self, method: str, target: str, call: Callable[[], Any]) -> Any:
        started = time.monotonic()
        time.sleep(self.seconds)
        with self._lock:
            result = call()
            self.spans.append((method, target, started, time.monotonic()))
        return result

    def create_runtime_class(self, body: dict[str, Any]) -> dict[str, Any]:
        create = super().create_runtime_class
        return self._timed("runtimeclass", body["metadata"]["name"], lambda: create(body))

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        create = super().create_config_map
        name = body["metadata"]["name"]
        return self._timed(name, name, lambda: create(namespace, body))

    def update_profile_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        update_status = super().update_profile_status
        return self._timed("status", name, lambda: update_status(name, body))


def test_the_plan_is_written_beside_the_runtime_classes_and_before_any_status() -> None:
    """One large write (the plan) does not hold up the pool: it goes out with the first
    RuntimeClasses. A status never goes out before the plan and its own RuntimeClass are
    written (it says both are), nor the rollout before the plan."""
    api = TimedApi(seconds=0.05)
    for index in range(6):
        api.apply_profile(profile_document(f"p{index}", isolation="Process"))
    settings = ReconcileSettings(namespace=NAMESPACE)
    controller = Controller(api, RelistingCache(api, NAMESPACE), settings, Metrics(), workers=2)
    assert not controller.run_pass().errors
    spans = {(kind, target): (start, end) for kind, target, start, end in api.spans}
    plan = spans[("wcow-runtime-plan", "wcow-runtime-plan")]
    classes = [span for (kind, _), span in spans.items() if kind == "runtimeclass"]
    assert len(classes) == 6
    assert plan[0] < min(end for _, end in classes)  # among the first writes
    assert spans[("wcow-runtime-rollout", "wcow-runtime-rollout")][0] >= plan[1]
    for index in range(6):
        status = spans[("status", f"p{index}")]
        assert status[0] >= plan[1]
        assert status[0] >= spans[("runtimeclass", f"p{index}")][1]


def test_with_cordon_a_node_done_hands_its_slot_to_a_node_it_cordons_at_once(
    api: FakeApi, controller: Controller
) -> None:
    """``drain: Cordon``: the hand-over records the next node as draining, cordons it,
    uncordons the node that finished, and lets the cordoned node in, all before any pass."""
    api.nodes = [windows_node(f"n{i}") for i in range(3)]
    api.apply_profile(profile_document("hv", rollout={"drain": "Cordon"}))
    settle(controller)
    assert list(rollout_of(api).permitted) == ["n0"]
    assert api.nodes[0]["spec"]["unschedulable"] is True
    plan = str((api.plan() or {})["hash"])
    done = windows_node("n0", plan, "Ready")["metadata"]["annotations"]
    api.nodes[0]["metadata"]["annotations"].update(done)
    api.calls.clear()
    assert controller.hand_over()
    rollout = rollout_of(api)
    assert sorted(rollout.permitted) == ["n0", "n1"]
    assert rollout.draining == {}
    assert api.nodes[1]["spec"]["unschedulable"] is True
    assert api.nodes[1]["metadata"]["annotations"][CORDONED_BY] == CORDONED_BY_VALUE
    assert "unschedulable" not in api.nodes[0]["spec"]  # done: uncordoned
    assert CORDONED_BY not in api.nodes[0]["metadata"]["annotations"]
    assert "unschedulable" not in api.nodes[2].get("spec", {})  # waits its turn
    writes = api.writes()
    assert writes.count("replace_config_map") == 2  # draining, then permitted
    assert "update_profile_status" not in writes  # the pass has not run
    api.calls.clear()
    settle(controller)
    assert "replace_config_map" not in api.writes()  # the pass agrees with the hand-over


def test_hand_overs_are_spaced_by_the_fleet_size() -> None:
    """Every rollout write reaches every agent: the spacing keeps the deliveries a second
    bounded, within a floor and a ceiling."""
    assert hand_over_spacing(0) == HAND_OVER_FLOOR_SECONDS
    assert hand_over_spacing(12) == HAND_OVER_FLOOR_SECONDS
    assert hand_over_spacing(200) == pytest.approx(0.1)
    assert hand_over_spacing(1000) == pytest.approx(0.5)
    assert hand_over_spacing(50_000) == HAND_OVER_CEILING_SECONDS
    for nodes in (150, 400, 1500):
        assert nodes / hand_over_spacing(nodes) <= HAND_OVER_DELIVERIES_PER_SECOND + 1e-9


def test_the_observed_plan_is_decoded_once_per_text() -> None:
    reader = PlanReader()
    first = reader.read({"data": {PLAN_KEY: '{"hash": "a"}'}})
    assert first == {"hash": "a"}
    assert reader.read({"data": {PLAN_KEY: '{"hash": "a"}'}}) is first
    assert reader.read({"data": {PLAN_KEY: '{"hash": "b"}'}}) == {"hash": "b"}
    assert reader.read({"data": {PLAN_KEY: "not json"}}) is None
    assert reader.read({"data": {}}) is None
