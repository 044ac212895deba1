"""Leader election that never leaves a replica writing without the Lease."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client

from wcow_operator.k8s import leader
from wcow_operator.k8s.leader import SafeLeaseLock


class Unreachable:
    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise urllib3.exceptions.MaxRetryError(None, "/apis/coordination.k8s.io", "refused")

        return call


class Recording:
    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []

    def replace_namespaced_lease(self, **kwargs: Any) -> None:
        self.kwargs.append(kwargs)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.kwargs.append(kwargs)
        return client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=client.V1LeaseSpec())


def record() -> Any:
    now = str(datetime.now())  # as kubernetes.leaderelection builds its records
    fields = {"holder_identity": "me", "lease_duration": 15, "acquire_time": now, "renew_time": now}
    return type("Record", (), fields)()


def test_transport_errors_are_failed_attempts_not_crashes() -> None:
    lock = SafeLeaseLock("wcow-operator", "ns", "me")
    lock.api_instance = Unreachable()
    ok, error = lock.get("wcow-operator", "ns")
    assert ok is False
    assert isinstance(error, urllib3.exceptions.MaxRetryError)
    assert lock.create("wcow-operator", "ns", record()) is False
    lock.lease_reference = client.V1Lease(spec=client.V1LeaseSpec())
    assert lock.update("wcow-operator", "ns", record()) is False
    assert lock.last_renewed is None


def test_calls_carry_a_timeout_and_renewals_are_remembered() -> None:
    lock = SafeLeaseLock("wcow-operator", "ns", "me")
    recording = Recording()
    lock.api_instance = leader._TimedCalls(recording, 5)  # type: ignore[arg-type]
    assert lock.get("wcow-operator", "ns")[0] is True
    assert lock.update("wcow-operator", "ns", record()) is True
    assert lock.last_renewed is not None
    assert all(k.get("_request_timeout") == 5 for k in recording.kwargs)


def test_watchdog_exits_when_the_lease_goes_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[str] = []

    def fake_exit(reason: str) -> None:
        exits.append(reason)
        raise SystemExit

    monkeypatch.setattr(leader, "_exit", fake_exit)
    monkeypatch.setattr(leader.time, "sleep", lambda _s: None)
    lock = SafeLeaseLock("wcow-operator", "ns", "me")
    lock.last_renewed = leader.time.monotonic() - leader.LEASE_SECONDS - 1
    leading = threading.Event()
    leading.set()
    with pytest.raises(SystemExit):
        leader._watchdog(lock, leading)
    assert "not renewed" in exits[0]
