"""VMTooSmall: a pod whose limits need a larger VM than it gets is refused,
or admitted with a warning under spec.vm.oversizedPods: Warn; physically backed Fixed VMs
are charged through the RuntimeClass overhead, not by raising requests."""

from __future__ import annotations

import pytest

from tests.admission.pods import FROM_LIMITS, container, pod, profile, profiles
from tests.conftest import SAMPLES, profile_document
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB as MEM
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT as CPU
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_operator.cli import load_profiles, main
from wcow_operator.render.runtimeclass import render_runtime_class
from wcow_operator.webhook.decide import admit, admit_update
from wcow_operator.webhook.decision import VM_TOO_SMALL, Admitted, Decision, Refused

FIXED = profiles(profile("hv"))  # hcsshim's default VM: 2 processors, 1024 MB
WARN = profiles(profile("hv", vm={"oversizedPods": "Warn"}))


def refused(decision: Decision) -> Refused:
    assert isinstance(decision, Refused), decision
    return decision


def admitted(decision: Decision) -> Admitted:
    assert isinstance(decision, Admitted), decision
    return decision


def test_cpu_limits_above_a_fixed_vm_are_refused_naming_need_size_and_container() -> None:
    body = pod(
        containers=[container("web", limits={"cpu": "2"}), container("log", limits={"cpu": "500m"})]
    )
    decision = refused(admit(body, FIXED))
    assert decision.reason == VM_TOO_SMALL
    assert "total 2.5 cores, a VM of 3 processors" in decision.message
    assert "web 2, log 500m" in decision.message
    assert "its VM has 2 (spec.vm.processorCount of the Fixed profile, unset" in decision.message
    assert "WindowsRuntimeProfile 'hv'" in decision.message
    assert "lower the CPU limits to at most 2" in decision.message
    assert "oversizedPods: Warn" in decision.message


def test_memory_limits_need_the_vm_s_own_512_mb_besides() -> None:
    fits = pod(containers=[container(limits={"memory": "512Mi"})])  # 512 + 512 = 1024
    assert admitted(admit(fits, FIXED)).pod == fits
    body = pod(containers=[container(limits={"memory": "1Gi"})])
    decision = refused(admit(body, FIXED))
    assert decision.reason == VM_TOO_SMALL
    assert "total 1024 MiB, a VM of 1536 MB with the VM's own 512 MB" in decision.message
    assert "its VM has 1024 MB (spec.vm.memoryMB of the Fixed profile" in decision.message
    assert "at most 512 MiB" in decision.message
    sized = profiles(profile("hv", vm={"memoryMB": 2048, "processorCount": 4}))
    assert admitted(admit(body, sized)).pod == body


def test_counted_as_for_from_pod_limits_requests_and_init_containers() -> None:
    requests_only = pod(containers=[container(requests={"memory": "2Gi"})])
    assert "total 2048 MiB" in refused(admit(requests_only, FIXED)).message
    # an init container runs alone: 1 processor beside the 1 of a sidecar started before it
    init = pod(
        containers=[container(limits={"cpu": "1"})],
        init=[
            {**container("side", limits={"cpu": "1"}), "restartPolicy": "Always"},
            container("setup", limits={"cpu": "2"}),
        ],
    )
    decision = refused(admit(init, FIXED))
    assert "total 3 cores" in decision.message  # max(1 + 1, 2 + 1)
    pod_level = pod(resources={"limits": {"cpu": "4"}})
    assert refused(admit(pod_level, FIXED)).reason == "PodLevelResourcesNotSupported"
    assert admitted(admit(pod(), FIXED)).warnings == ()  # no limits: nothing to hold


def test_both_resources_short_are_named_in_one_refusal() -> None:
    body = pod(containers=[container(limits={"cpu": "4", "memory": "4Gi"})])
    message = refused(admit(body, FIXED)).message
    assert "CPU limits" in message
    assert "memory limits" in message
    assert "lower the CPU limits to at most 2 and the memory limits to at most 512 MiB" in message


def test_the_pod_s_own_sizing_annotations_are_the_vm_it_gets() -> None:
    bounded = profiles(profile("hv", vm={"maxProcessorCount": 8, "maxMemoryMB": 8192}))
    limits = [container(limits={"cpu": "3", "memory": "3Gi"})]
    larger = pod(containers=limits, annotations={CPU: "4", MEM: "4096"})
    assert admitted(admit(larger, bounded)).pod == larger
    smaller = pod(containers=limits, annotations={CPU: "4", MEM: "2048"})
    decision = refused(admit(smaller, bounded))
    assert f"its VM has 2048 MB (the pod's annotation {MEM}=2048)" in decision.message
    # FromPodLimits sizes the VM from the limits, unless the pod asks for a size itself
    sized = profiles(profile("hv", vm=FROM_LIMITS))
    assert isinstance(admit(pod(containers=limits), sized), Admitted)
    own = pod(containers=limits, annotations={CPU: "1"})
    assert f"its VM has 1 (the pod's annotation {CPU}=1)" in refused(admit(own, sized)).message


def test_warn_admits_unchanged_with_the_same_facts_as_a_warning() -> None:
    body = pod(containers=[container(limits={"cpu": "3", "memory": "2Gi"})])
    result = admitted(admit(body, WARN))
    assert result.pod == body
    assert not result.mutated
    (warning,) = result.warnings
    assert warning.reason == VM_TOO_SMALL
    assert "total 3 cores" in warning.message
    assert "total 2048 MiB, a VM of 2560 MB" in warning.message
    assert "its VM has 1024 MB" in warning.message
    assert "admitted because the profile's spec.vm.oversizedPods is Warn" in warning.message
    assert str(warning).startswith("VMTooSmall: the pod's CPU limits")


def test_update_judges_size_only_where_placement_is_judged_again() -> None:
    old = pod(containers=[container(limits={"cpu": "3"})], schedulingGates=[{"name": "x/y"}])
    labelled = {**old, "metadata": {**old["metadata"], "labels": {"a": "b"}}}
    assert isinstance(admit_update(old, labelled, FIXED), Admitted)  # a stored pod is never stuck
    placed = {**old, "spec": {**old["spec"], "nodeSelector": {"pool": "big"}}}
    assert refused(admit_update(old, placed, FIXED)).reason == VM_TOO_SMALL
    (warning,) = admitted(admit_update(old, placed, WARN)).warnings
    assert warning.reason == VM_TOO_SMALL


def test_oversized_pods_takes_refuse_or_warn_only() -> None:
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(profile_document("hv", vm={"oversizedPods": "warn"}))
    assert "vm.oversizedPods" in str(caught.value.problems)
    vm = profile("hv").spec.effective_vm()
    assert vm is not None
    assert vm.oversized_pods == "Refuse"


def test_physically_backed_fixed_vm_is_charged_through_the_overhead_not_requests() -> None:
    """The reserve sample, as a new user tries it: the whole VM (2 processors, 4096 MB) is
    the RuntimeClass overhead, so the scheduler charges requests + 4096Mi; the requests
    are left as written (raising them to limits would charge the containers' memory twice)."""
    loaded, errors = load_profiles([str(SAMPLES / "hyperv-ltsc2022-reserve.yaml")])
    assert errors == []
    reserve = loaded[0].profile
    assert render_runtime_class(reserve)["overhead"] == {"podFixed": {"cpu": "2", "memory": "4Gi"}}
    body = pod(
        reserve.name,
        containers=[container(limits={"memory": "2Gi", "cpu": "2"}, requests={"memory": "1Gi"})],
    )
    result = admitted(admit(body, profiles(reserve)))
    assert result.pod == body
    assert result.changes == ()
    # the same profile sized from the limits raises the request: the VM follows the pod
    spec = reserve.spec.model_dump(by_alias=True, exclude_none=True)
    spec["vm"].update(FROM_LIMITS)
    sized = profile(reserve.name, **spec)
    raised = admitted(admit(body, profiles(sized)))
    assert raised.pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "2Gi"


def test_wcow_admit_help_says_what_the_webhook_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["admit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "on a physically backed VM memory requests equal to its limits" in text
    assert "On a Fixed profile nothing is changed" in text
    assert "RuntimeClass overhead, the whole VM by default" in text
    assert "refused (VMTooSmall), or warned about where the profile's spec.vm.oversizedPods" in text
    assert "Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs" in text
