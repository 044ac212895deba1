"""The adapter's retries: transient errors are retried, conflicts and refusals are not."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.k8s.kubernetes_api import KubernetesApi


class Flaky:
    def __init__(self, failures: list[int], headers: dict[str, str] | None = None) -> None:
        self.failures = failures
        self.headers = headers
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            error = ApiException(status=self.failures.pop(0), reason="X")
            error.body = '{"message": "the server says no"}'
            error.headers = self.headers
            raise error
        return "ok"


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> tuple[KubernetesApi, list[Any]]:
    sleeps: list[Any] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)  # the retry helper sleeps with it
    errors: list[Any] = []
    writes: list[Any] = []
    api = KubernetesApi.__new__(KubernetesApi)
    api._on_error = lambda verb, resource, code: errors.append((verb, resource, code))
    api._on_write = lambda verb, resource: writes.append((verb, resource))
    api._attempts = 4
    api._timeout = 1
    return api, [sleeps, errors, writes]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried(
    adapter: tuple[KubernetesApi, list[Any]], status: int
) -> None:
    api, (sleeps, errors, writes) = adapter
    call = Flaky([status, status])
    assert api._call("create", "runtimeclasses", call) == "ok"
    assert call.calls == 3
    assert len(sleeps) == 2
    assert errors == [("create", "runtimeclasses", status)] * 2
    assert writes == [("create", "runtimeclasses")]


def test_retry_after_is_honoured(adapter: tuple[KubernetesApi, list[Any]]) -> None:
    api, (sleeps, _, _) = adapter
    api._call("list", "nodes", Flaky([429], headers={"Retry-After": "3"}))
    assert sleeps == [3.0]


@pytest.mark.parametrize("status", [409, 404, 403, 422])
def test_conflicts_and_refusals_surface_at_once(
    adapter: tuple[KubernetesApi, list[Any]], status: int
) -> None:
    api, (sleeps, _, writes) = adapter
    call = Flaky([status])
    with pytest.raises(ApiError) as caught:
        api._call("update", "configmaps", call)
    assert caught.value.status == status
    assert caught.value.message == "the server says no"
    assert call.calls == 1
    assert sleeps == []
    assert writes == []


def test_gives_up_after_the_last_attempt(adapter: tuple[KubernetesApi, list[Any]]) -> None:
    api, _ = adapter
    call = Flaky([500] * 10)
    with pytest.raises(ApiError):
        api._call("patch", "windowsruntimeprofiles", call)
    assert call.calls == 4
