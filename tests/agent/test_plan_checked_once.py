"""The agent checks a plan text once (``load_plan``: hash, every entry rendered again), not
at every cycle it runs on that text; any other text, even under the same resourceVersion, is
checked before it is used."""

from __future__ import annotations

import threading

import pytest

import wcow_agent.loop.cluster_view
from tests.agent.conftest import forge, hyperv, make_plan
from tests.agent.fakes import FakeCluster
from wcow_agent.loop.cluster import PlanObject
from wcow_agent.loop.cluster_view import ClusterView, RunOptions
from wcow_agent.loop.metrics import Metrics
from wcow_contract.wire.plan import dump_plan


def test_the_same_plan_text_is_checked_once_and_any_other_text_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks: list[str] = []
    load = wcow_agent.loop.cluster_view.load_plan

    def counted(text: str, source: str = "plan") -> object:
        checks.append(text)
        return load(text, source)

    monkeypatch.setattr(wcow_agent.loop.cluster_view, "load_plan", counted)
    stop, wake = threading.Event(), threading.Event()
    view = ClusterView(FakeCluster(), RunOptions(node_name="win-1"), Metrics(), stop, wake)
    good = make_plan(hyperv())
    view.on_plan(PlanObject(True, dump_plan(good), "7"))
    for _ in range(3):  # three cycles on one plan
        assert view.plan() == (good, None)
    assert len(checks) == 1

    entry = good.handlers["hv"].document()
    entry["runtime"]["runtime_type"] = "io.containerd.evil.v1"
    view.on_plan(PlanObject(True, forge({"hv": entry}), "7"))  # same resourceVersion
    plan, error = view.plan()
    assert plan is None
    assert error is not None
    assert "handlers.hv.runtime" in error, error
    assert view.plan() == (None, error)  # refused again, from the same check
    assert len(checks) == 2

    view.on_plan(PlanObject(True, dump_plan(good), "8"))
    assert view.plan() == (good, None)
    assert len(checks) == 3
