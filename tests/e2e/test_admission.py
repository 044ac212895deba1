"""The pod admission webhook on the real API server.

The operator runs as a subprocess serving its webhook on loopback (``--webhook-url
https://127.0.0.1:PORT``) and registers it itself; pods are created with dry-run=server and
for real, so the admitted spec includes the API server's own RuntimeClass admission
(overhead, scheduling). With the operator stopped, pods outside the wcow classes still pass.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    free_port,
    http_status,
    installed_crd,
    metric,
    namespace,
    profile,
    profiles_cleaned_up,
    running_operator,
    wait_for,
    windows_pod,
)
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION

pytestmark = pytest.mark.e2e


def _create(core: client.CoreV1Api, ns: str, body: dict[str, Any], *, dry_run: bool) -> Any:
    return core.api_client.sanitize_for_serialization(
        core.create_namespaced_pod(ns, body, dry_run="All" if dry_run else None)
    )


def _create_warned(
    core: client.CoreV1Api, ns: str, body: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The pod as created, and the Warning headers the client got with it."""
    created, _, headers = core.create_namespaced_pod_with_http_info(ns, body)
    return core.api_client.sanitize_for_serialization(created), str(headers.get("Warning", ""))


def _refusal(core: client.CoreV1Api, ns: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, body, dry_run="All")
    return str(caught.value.body)


def _delete_configurations(kube: client.ApiClient) -> None:
    registration = client.AdmissionregistrationV1Api(kube)
    with contextlib.suppress(ApiException):
        registration.delete_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    with contextlib.suppress(ApiException):
        registration.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)


@pytest.fixture
def cluster(kube: client.ApiClient, prefix: str) -> Iterator[dict[str, Any]]:
    """CRD, three profiles (FromPodLimits; Fixed; Fixed with oversizedPods Warn), a non-wcow
    RuntimeClass, the operator's and the pods' namespaces, the operator serving its webhook
    on loopback."""
    custom = client.CustomObjectsApi(kube)
    node = client.NodeV1Api(kube)
    core = client.CoreV1Api(kube)
    sized, fixed, other = f"{prefix}-sized", f"{prefix}-fixed", f"{prefix}-other"
    lenient = f"{prefix}-lenient"
    port = free_port()
    with contextlib.ExitStack() as stack:
        stack.enter_context(installed_crd(kube))
        operator_ns = stack.enter_context(namespace(kube, f"{prefix}-system"))
        pods_ns = stack.enter_context(namespace(kube, f"{prefix}-pods"))
        stack.callback(_delete_configurations, kube)
        node.create_runtime_class({"metadata": {"name": other}, "handler": "runc"})
        stack.callback(node.delete_runtime_class, other)
        running = stack.enter_context(
            running_operator(
                operator_ns, "--webhook-port", str(port), "--webhook-url",
                f"https://127.0.0.1:{port}",
            )
        )  # fmt: skip
        stack.enter_context(profiles_cleaned_up(kube, [sized, fixed, lenient]))
        vm = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}
        warn = {"vm": {"oversizedPods": "Warn"}}
        for name, spec in ((sized, {"vm": vm}), (fixed, {}), (lenient, warn)):
            body = profile(name, isolation="HyperV", windowsBuild="ltsc2022", **spec)
            custom.create_cluster_custom_object("runtime.wcow.dev", "v1alpha1",
                                                "windowsruntimeprofiles", body)  # fmt: skip
        for name in (sized, fixed, lenient):
            wait_for(f"RuntimeClass {name}", lambda name=name: node.read_runtime_class(name))
        registration = client.AdmissionregistrationV1Api(kube)

        def registered() -> bool:
            hooks = registration.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION)
            expression = hooks.webhooks[0].match_conditions[0].expression
            return all(f'"{name}"' in expression for name in (sized, fixed, lenient))

        wait_for("the webhook registered for the three classes", registered)
        wait_for(
            "the default ServiceAccount",
            lambda: core.read_namespaced_service_account("default", pods_ns),
        )
        yield {
            "core": core,
            "ns": pods_ns,
            "sized": sized,
            "fixed": fixed,
            "lenient": lenient,
            "other": other,
            "operator": running,
        }


def test_admission_on_the_real_api_server(cluster: dict[str, Any]) -> None:
    core, ns = cluster["core"], cluster["ns"]
    limits = {"limits": {"cpu": "3", "memory": "3Gi"}}
    for dry_run in (True, False):
        sized = windows_pod("sized", cluster["sized"], **limits)
        admitted = _create(core, ns, sized, dry_run=dry_run)
        annotations = admitted["metadata"]["annotations"]
        assert annotations[ANNOTATION_PROCESSOR_COUNT] == "3"
        assert annotations[ANNOTATION_MEMORY_MB] == str(3072 + 512)
        # the API server's RuntimeClass admission: the class's Baseline overhead and scheduling
        assert admitted["spec"]["overhead"] == {"cpu": "100m", "memory": "512Mi"}
        assert admitted["spec"]["nodeSelector"]["kubernetes.io/os"] == "windows"
    stored = core.read_namespaced_pod("sized", ns).metadata.annotations
    assert stored[ANNOTATION_PROCESSOR_COUNT] == "3"

    fits = {"limits": {"cpu": "2", "memory": "512Mi"}}  # the default VM: 2 processors, 1024 MB
    fixed = _create(core, ns, windows_pod("fixed", cluster["fixed"], **fits), dry_run=True)
    assert ANNOTATION_PROCESSOR_COUNT not in (fixed["metadata"].get("annotations") or {})

    too_big = _refusal(core, ns, windows_pod("big", cluster["sized"], limits={"cpu": "12"}))
    assert "VMTooLarge" in too_big
    assert "maxProcessorCount 8" in too_big
    host = windows_pod("host", cluster["sized"])
    host["spec"]["securityContext"] = {"windowsOptions": {"hostProcess": True}}
    host["spec"]["hostNetwork"] = True
    assert "HostProcessWithHyperV" in _refusal(core, ns, host)

    # Terminating: not ready at once (the Service drops the replica), still answering for
    # --shutdown-delay-seconds, since the API server does not retry a failed webhook call.
    running = cluster["operator"]["process"]
    health = cluster["operator"]["health"]
    running.terminate()
    wait_for("the terminating operator to report not ready",
             lambda: http_status(f"http://127.0.0.1:{health}/readyz") == 503)  # fmt: skip
    assert running.poll() is None
    during = _create(core, ns, windows_pod("draining", cluster["sized"], **limits), dry_run=True)
    assert during["metadata"]["annotations"][ANNOTATION_PROCESSOR_COUNT] == "3"
    running.wait(timeout=30)

    # The webhook down: pods of other classes and without one pass; wcow pods wait.
    for name, runtime_class in (("plain", None), ("other", cluster["other"])):
        assert _create(core, ns, windows_pod(name, runtime_class), dry_run=False)["metadata"]["uid"]
    down = _refusal(core, ns, windows_pod("unsized", cluster["sized"], **limits))
    assert "failed calling webhook" in down


def test_a_huge_exponent_is_refused_at_once_on_the_real_api_server(
    cluster: dict[str, Any],
) -> None:
    """The API server accepts a memory limit of 1e20000000 and sends it
    to the webhook, which used to compute it exactly for 19 s (past the webhook's 5 s
    timeout: "context deadline exceeded", every wcow pod blocked meanwhile); it is now
    refused at once with its reason, and the next pod is admitted."""
    core, ns, sized = cluster["core"], cluster["ns"], cluster["sized"]
    huge = windows_pod("huge", sized, limits={"cpu": "1", "memory": "1e20000000"})
    started = time.monotonic()
    refusal = _refusal(core, ns, huge)
    elapsed = time.monotonic() - started
    assert "InvalidQuantity" in refusal, refusal[:2000]
    assert "spec.containers[app].resources.limits.memory" in refusal
    assert "failed calling webhook" not in refusal  # a refusal, not a timeout or a 500
    normal = _create(core, ns, windows_pod("normal", sized, limits={"cpu": "2"}), dry_run=True)
    assert normal["metadata"]["annotations"][ANNOTATION_PROCESSOR_COUNT] == "2"
    print(f"1e20000000 refused in {elapsed:.2f} s (API server and webhook)")


def test_a_late_annotation_is_refused_at_update_on_the_real_api_server(
    cluster: dict[str, Any],
) -> None:
    """A pod created gated, then annotated with 240 processors and 1 TB
    before it is ungated, is refused at the UPDATE; a label and the ungating pass."""
    core, ns, sized = cluster["core"], cluster["ns"], cluster["sized"]
    gated = windows_pod("gated", sized, limits={"cpu": "1", "memory": "1Gi"})
    gated["spec"]["schedulingGates"] = [{"name": "example.com/later"}]
    created = _create(core, ns, gated, dry_run=False)
    assert created["metadata"]["annotations"][ANNOTATION_PROCESSOR_COUNT] == "2"  # the floor
    grow = {"metadata": {"annotations": {ANNOTATION_PROCESSOR_COUNT: "240",
                                         ANNOTATION_MEMORY_MB: "1048576"}}}  # fmt: skip
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("gated", ns, grow)
    assert "AnnotationChanged" in str(caught.value.body), caught.value.body
    stored = core.read_namespaced_pod("gated", ns).metadata.annotations
    assert stored[ANNOTATION_PROCESSOR_COUNT] == "2"
    labelled = core.patch_namespaced_pod("gated", ns, {"metadata": {"labels": {"app": "web"}}})
    assert labelled.metadata.labels == {"app": "web"}
    ungated = core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": None}})
    assert not ungated.spec.scheduling_gates
    assert ungated.metadata.annotations[ANNOTATION_PROCESSOR_COUNT] == "2"


def test_a_fixed_vm_too_small_is_refused_or_admitted_with_a_warning_the_client_sees(
    cluster: dict[str, Any],
) -> None:
    """Limits of 3 cores and 3 GiB need a VM of 3 processors and 3584 MB;
    the Fixed profiles give 2 and 1024. Refused (VMTooSmall, the need and the size named);
    under spec.vm.oversizedPods: Warn created as written, and kubectl's client gets the
    warning (a Warning header, as kubectl prints it)."""
    core, ns = cluster["core"], cluster["ns"]
    limits = {"limits": {"cpu": "3", "memory": "3Gi"}}
    refusal = _refusal(core, ns, windows_pod("small", cluster["fixed"], **limits))
    assert "VMTooSmall" in refusal, refusal[:2000]
    assert "total 3 cores, a VM of 3 processors, but its VM has 2" in refusal
    assert "total 3072 MiB, a VM of 3584 MB" in refusal
    assert "its VM has 1024 MB" in refusal

    before = metric(
        cluster["operator"]["metrics"], 'wcow_admission_warned_total{reason="VMTooSmall"}'
    )
    created, warning = _create_warned(core, ns, windows_pod("warned", cluster["lenient"], **limits))
    assert "VMTooSmall: the pod's CPU limits (app 3; requests where no limit)" in warning
    assert "its VM has 1024 MB" in warning
    assert "spec.vm.oversizedPods is Warn" in warning
    assert warning.count("VMTooSmall") == 1  # the validating webhook alone returns it
    assert created["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "3", "memory": "3Gi"}
    assert created["metadata"].get("annotations") in (None, {})  # a Fixed VM: not changed
    stored = core.read_namespaced_pod("warned", ns)
    assert stored.spec.containers[0].resources.requests == {"cpu": "3", "memory": "3Gi"}
    after = metric(
        cluster["operator"]["metrics"], 'wcow_admission_warned_total{reason="VMTooSmall"}'
    )
    assert after == before + 1
