"""The controller's memo (``reconcile.profiles.Memo``) is a shortcut only: through a run of
changes, every pass returns with it exactly what it returns without it, and at rest it
works out no status again."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.controller.builders import NAMESPACE, observed, profile_body, windows_node
from tests.controller.test_reconcile import apply
from wcow_operator.reconcile import profile_status
from wcow_operator.reconcile.model import Observed, ObservedProfile, Outcome, ReconcileSettings
from wcow_operator.reconcile.profiles import Memo
from wcow_operator.reconcile.reconciler import reconcile

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = ReconcileSettings(namespace=NAMESPACE)


class Twin:
    """Runs every pass twice, with the memo and without, and applies the writes."""

    def __init__(self, state: Observed) -> None:
        self.state = state
        self.memo = Memo()
        self.passes = 0
        self.worked_out: list[str] = []  # the profiles whose status the last pass computed

    def step(self, settings: ReconcileSettings = SETTINGS) -> Outcome:
        self.passes += 1
        now = START + timedelta(minutes=self.passes)  # a new clock each pass
        without = reconcile(copy.deepcopy(self.state), settings, now)
        self.worked_out.clear()
        with_memo = reconcile(self.state, settings, now, self.memo)
        assert with_memo == without
        self.state = apply(self.state, with_memo)
        return with_memo

    def settle(self, settings: ReconcileSettings = SETTINGS) -> None:
        for _ in range(5):
            if not self.step(settings).writes:
                return
        raise AssertionError("did not settle")

    def edit(self, name: str, change: Any) -> None:
        """Change a profile's stored body (as a user or the API server would)."""
        profiles = []
        for profile in self.state.profiles:
            body = copy.deepcopy(profile.body)
            if profile.name == name:
                change(body)
            profiles.append(ObservedProfile(body))
        self.state = dataclasses.replace(self.state, profiles=profiles)


def count_statuses(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    original = profile_status.status_of

    def counted(state: Any, *args: Any) -> Any:
        calls.append(state.name)
        return original(state, *args)

    monkeypatch.setattr(profile_status, "status_of", counted)


def test_a_run_of_changes_gives_the_same_with_and_without_the_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    twin = Twin(observed(profile_body("hv", vm={"memoryMB": 2048}), profile_body("proc")))
    count_statuses(monkeypatch, twin.worked_out)
    twin.settle()
    assert twin.step().writes == []
    assert twin.worked_out == []  # at rest: every status as the last pass left it

    def new_generation(body: dict[str, Any]) -> None:
        body["spec"]["vm"]["memoryMB"] += 2048
        body["metadata"]["generation"] += 1

    for _ in range(2):  # the first change also ends proc's part in the first rollout
        twin.edit("hv", new_generation)
        assert ("update-status", "hv") in [(w.kind, w.target) for w in twin.step().writes]
        twin.settle()
    assert twin.worked_out == []
    twin.edit("hv", new_generation)
    twin.step()
    assert twin.worked_out == ["hv"]  # only the profile that changed
    twin.settle()
    # A label the API server would refuse makes the spec invalid; labels leave the
    # generation as it was.
    twin.edit("proc", lambda body: body["metadata"].update(labels={"bad label": "x"}))
    twin.settle()
    valid = [c for c in twin.state.profiles[1].status["conditions"] if c["type"] == "Valid"]
    assert valid[0]["status"] == "False"
    twin.edit("proc", lambda body: body["metadata"].update(labels={}))
    twin.settle()
    # Someone edits the status: it is written back.
    twin.edit("hv", lambda body: body["status"].update(handler="other"))
    assert [(w.kind, w.target) for w in twin.step().writes] == [("update-status", "hv")]
    twin.settle()
    # Nodes come and report; the RuntimeClass is deleted; the operator's settings change.
    node = windows_node("n0", {"hv": ("Ready", "Ready"), "proc": ("Ready", "Ready")})
    twin.state = dataclasses.replace(twin.state, nodes=[node])
    twin.settle()
    twin.state = dataclasses.replace(twin.state, runtime_classes={})
    twin.settle()
    twin.settle(dataclasses.replace(SETTINGS, require_node_gating=True))
    twin.settle()
