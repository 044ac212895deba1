"""Pod UPDATE: what hcsshim reads is fixed once the pod exists; the
webhook configurations cover UPDATE in the validating webhook only; decisions run off the
event loop with a deadline."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from typing import Any

import kopf
import pytest
from prometheus_client import CollectorRegistry

from tests.admission.pods import FROM_LIMITS, container, pod, profile, profiles
from wcow_contract.catalog import hcs_annotations as hcs
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB as MEM
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT as CPU
from wcow_operator.render.webhooks import Endpoint, webhook_configuration
from wcow_operator.webhook.decide import admit, admit_update
from wcow_operator.webhook.decider import Decider
from wcow_operator.webhook.decision import (
    ANNOTATION_CHANGED,
    TIMED_OUT,
    WINDOWS_BUILD_MISMATCH,
    Admitted,
    Decision,
    Refused,
)
from wcow_operator.webhook.metrics import AdmissionMetrics
from wcow_operator.webhook.server import register

SIZED = profiles(profile("hv", vm=FROM_LIMITS))
GATED = {"schedulingGates": [{"name": "example.com/wait"}]}


def _created(body: dict[str, Any]) -> dict[str, Any]:
    decision = admit(body, SIZED)
    assert isinstance(decision, Admitted), decision
    return decision.pod


def _reason(decision: Decision) -> str | None:
    return decision.reason if isinstance(decision, Refused) else None


def test_a_gated_pod_reannotated_past_the_bounds_is_refused() -> None:
    """The attack of the issue: created small and gated, annotated with 240 processors and
    1 TB, then ungated: the kubelet would build that VM."""
    old = _created(pod(containers=[container(limits={"cpu": "1", "memory": "1Gi"})], **GATED))
    new = copy.deepcopy(old)
    new["metadata"]["annotations"].update({CPU: "240", MEM: "1048576"})
    decision = admit_update(old, new, SIZED)
    assert _reason(decision) == ANNOTATION_CHANGED
    assert CPU in decision.message  # type: ignore[union-attr]
    # Within the bounds too: the kubelet reads them at every sandbox creation.
    new["metadata"]["annotations"].update({CPU: "2", MEM: "2048"})
    assert _reason(admit_update(old, new, SIZED)) == ANNOTATION_CHANGED
    # Removed, added (any key hcsshim reads that the handler lets through): refused.
    removed = copy.deepcopy(old)
    del removed["metadata"]["annotations"][CPU]
    assert _reason(admit_update(old, removed, SIZED)) == ANNOTATION_CHANGED
    added = copy.deepcopy(old)
    added["metadata"]["annotations"][hcs.PROCESSOR_WEIGHT] = "1"
    assert _reason(admit_update(old, added, SIZED)) == ANNOTATION_CHANGED


def test_unrelated_updates_pass_even_where_the_profile_changed_since() -> None:
    old = _created(pod(containers=[container(limits={"cpu": "6"})], **GATED))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"app": "web"}
    new["metadata"]["annotations"]["example.com/note"] = "x"  # not read by hcsshim
    new["metadata"]["finalizers"] = []
    new["spec"]["schedulingGates"] = []
    assert isinstance(admit_update(old, new, SIZED), Admitted)
    # The profile now allows fewer processors than the pod has: its labels can still change.
    smaller = profiles(profile("hv", vm={**FROM_LIMITS, "maxProcessorCount": 2}))
    assert isinstance(admit(old, smaller), Refused)
    assert isinstance(admit_update(old, new, smaller), Admitted)
    # Annotations the handler does not let through are containerd's to drop.
    closed = profiles(profile("hv", vm={"maxProcessorCount": 8}, annotations={"pod": []}))
    assert isinstance(admit_update(old, {**new, "metadata": {"annotations": {CPU: "64"}}},
                                   closed), Admitted)  # fmt: skip


def test_a_gated_pods_new_placement_is_judged_as_at_creation() -> None:
    process = profiles(profile("proc", isolation="Process", windowsBuild="ltsc2019"))
    old = pod("proc", **GATED)
    pinned = copy.deepcopy(old)
    pinned["spec"]["nodeSelector"] = {"node.kubernetes.io/windows-build": "10.0.20348"}
    assert _reason(admit_update(old, pinned, process)) == WINDOWS_BUILD_MISMATCH
    pinned["spec"]["nodeSelector"]["node.kubernetes.io/windows-build"] = "10.0.17763"
    assert isinstance(admit_update(old, pinned, process), Admitted)


def test_other_classes_and_odd_shapes_never_raise() -> None:
    odd = {"spec": {"runtimeClassName": "hv"}, "metadata": {"annotations": "x"}}
    pairs = (({}, {}), ({"metadata": "x"}, pod()), (pod(), odd), (pod(None), pod(None)))
    for old, new in pairs:
        assert isinstance(admit_update(old, new, SIZED), Admitted | Refused)


def test_only_the_validating_webhook_sees_updates() -> None:
    endpoint = Endpoint(url="https://127.0.0.1:9443")
    rules = {
        kind: webhook_configuration(kind, endpoint, ["hv"], ["x"], ca_bundle=None)["webhooks"][0][
            "rules"
        ]
        for kind in ("mutating", "validating")
    }
    base = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}
    assert rules["mutating"] == [{**base, "operations": ["CREATE"]}]
    assert rules["validating"] == [
        {**base, "resources": ["pods", "pods/ephemeralcontainers"],
         "operations": ["CREATE", "UPDATE"]}
    ]  # fmt: skip


def _handlers(decider: Decider) -> tuple[AdmissionMetrics, dict[str, Any]]:
    registry = kopf.OperatorRegistry()
    metrics = AdmissionMetrics(CollectorRegistry())
    register(registry, lambda: SIZED, metrics, decider=decider)
    return metrics, {h.id: h.fn for h in registry._webhooks.get_all_handlers()}


def test_the_validating_handler_refuses_a_changed_annotation_at_update() -> None:
    _, handlers = _handlers(Decider())
    old = _created(pod(**GATED))
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][CPU] = "240"
    with pytest.raises(kopf.AdmissionError, match=ANNOTATION_CHANGED):
        asyncio.run(handlers["validate-pods"](body=new, old=old, operation="UPDATE"))
    asyncio.run(handlers["validate-pods"](body=old, old=old, operation="UPDATE"))


def test_a_slow_decision_is_refused_at_its_deadline_and_others_go_on() -> None:
    """Decisions run in threads: the event loop answers other requests meanwhile, and one
    past its deadline is a refusal (DecisionTimeout), not a stalled webhook."""
    release = threading.Event()

    def slow(*_: Any) -> Decision:
        release.wait(5)
        return Admitted(pod={})

    async def scenario() -> tuple[Decision | None, Decision | None, float]:
        decider = Decider(workers=2, timeout=0.3)
        started = time.monotonic()
        stuck = asyncio.create_task(decider.decide(slow))
        quick = await decider.decide(admit, pod(), SIZED)
        quick_after = time.monotonic() - started
        result = await stuck
        release.set()
        decider.shutdown()
        return result, quick, quick_after

    timed_out, quick, quick_after = asyncio.run(scenario())
    assert timed_out is None
    assert isinstance(quick, Admitted)
    assert quick_after < 0.3  # answered while the slow one was still running


def test_the_handler_answers_decision_timeout_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocker = threading.Event()

    def stalled(*_: Any) -> Decision:
        blocker.wait(2)
        return Admitted(pod={})

    monkeypatch.setattr("wcow_operator.webhook.server.admit", stalled)
    metrics, handlers = _handlers(Decider(timeout=0.05))
    try:
        with pytest.raises(kopf.AdmissionError, match=TIMED_OUT) as caught:
            asyncio.run(handlers["mutate-pods"](body=pod(), patch=kopf.Patch()))
    finally:
        blocker.set()
    assert caught.value.code == 503
    assert metrics.refused.labels(reason=TIMED_OUT)._value.get() == 1


def test_an_ephemeral_host_process_container_in_a_hyperv_pod_is_refused() -> None:
    """``kubectl debug`` adds a container to the pod's sandbox, here its utility VM: a
    HostProcess one is refused as it would be at CREATE; a plain one passes."""
    old = _created(pod(**GATED))
    debug = {"name": "debug", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}
    plain = copy.deepcopy(old)
    plain["spec"]["ephemeralContainers"] = [debug]
    assert isinstance(admit_update(old, plain, SIZED), Admitted)
    privileged = copy.deepcopy(old)
    privileged["spec"]["ephemeralContainers"] = [
        {**debug, "securityContext": {"windowsOptions": {"hostProcess": True}}}
    ]
    decision = admit_update(old, privileged, SIZED)
    assert isinstance(decision, Refused)
    assert decision.reason == "HostProcessWithHyperV"
    assert "spec.ephemeralContainers[debug]" in decision.message


def test_the_validating_handler_is_called_for_ephemeral_containers_too() -> None:
    """Kopf routes a request with a subresource only to handlers registered for it."""
    registry = kopf.OperatorRegistry()
    register(registry, lambda: SIZED, AdmissionMetrics(CollectorRegistry()), decider=Decider())
    found = {h.id: h.subresource for h in registry._webhooks.get_all_handlers()}
    assert found == {"mutate-pods": None, "validate-pods": "*"}


def test_a_decision_that_raises_is_a_refusal_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any) -> Decision:
        raise RecursionError("a bug met a hostile pod")

    monkeypatch.setattr("wcow_operator.webhook.server.admit", broken)
    metrics, handlers = _handlers(Decider())
    with pytest.raises(kopf.AdmissionError, match="InternalError") as caught:
        asyncio.run(handlers["mutate-pods"](body=pod(), patch=kopf.Patch()))
    assert "a bug met" not in str(caught.value)  # the detail is the operator's log's
    assert "a bug met a hostile pod" in caplog.text
    assert metrics.refused.labels(reason="InternalError")._value.get() == 1
