"""The reconciler's thread as main runs it: passes only once elected, a stop ends it at any
point, and failed passes back off."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from tests.conftest import profile_document
from tests.controller.builders import NAMESPACE
from tests.controller.fake_api import FakeApi, RelistingCache
from wcow_contract.support.retry import Backoff
from wcow_operator.controller.controller import Controller, PassReport, Runner
from wcow_operator.controller.metrics import Metrics
from wcow_operator.main import Reconciler
from wcow_operator.reconcile.core import ReconcileSettings


@pytest.fixture
def runner() -> Runner:
    api = FakeApi()
    api.apply_profile(profile_document("hv"))
    controller = Controller(
        api,
        RelistingCache(api, NAMESPACE),
        ReconcileSettings(namespace=NAMESPACE),
        Metrics(),
        clock=lambda: datetime(2026, 3, 1, tzinfo=UTC),
        workers=2,
        instance="test",
    )
    return Runner(controller, resync_seconds=3600, debounce_seconds=0.01)


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_no_pass_before_the_lease_and_a_stop_ends_the_wait(runner: Runner) -> None:
    elected, leading, stopping = threading.Event(), threading.Event(), threading.Event()
    reconciler = Reconciler(runner, elected, leading, stopping)
    thread = threading.Thread(target=reconciler.run)
    thread.start()
    time.sleep(0.3)
    assert not leading.is_set()
    assert runner.last_pass_ok is None
    reconciler.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert runner.controller.metrics.registry.get_sample_value("wcow_leader") == 0


def test_once_elected_it_leads_passes_and_stops_with_its_pool_closed(runner: Runner) -> None:
    elected, leading, stopping = threading.Event(), threading.Event(), threading.Event()
    reconciler = Reconciler(runner, elected, leading, stopping)
    thread = threading.Thread(target=reconciler.run)
    thread.start()
    elected.set()
    assert _wait_for(lambda: runner.last_pass_ok is not None)
    assert leading.is_set()
    assert runner.controller.metrics.registry.get_sample_value("wcow_leader") == 1
    reconciler.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="shutdown"):  # no write can start after
        runner.controller._pool.submit(int)


def test_failed_passes_back_off_and_a_good_one_resets_the_delay(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = iter([["x"], ["x"], ["x"], [], ["x"]])
    waits: list[float] = []
    stop = threading.Event()
    real_wait = stop.wait

    def run_pass() -> PassReport:
        errors = next(outcomes, None)
        if errors is None:
            stop.set()
            return PassReport()
        runner.trigger()  # the next pass at once, so only the backoff waits
        return PassReport(errors=list(errors))

    def wait(timeout: float | None = None) -> bool:
        if timeout is not None and timeout >= 1:
            waits.append(timeout)
            return stop.is_set()
        return real_wait(timeout)

    monkeypatch.setattr(runner.controller, "run_pass", run_pass)
    monkeypatch.setattr(stop, "wait", wait)
    runner.backoff = Backoff(initial=1, maximum=3)
    runner.run(stop)
    assert waits == [1, 2, 3, 1]
