"""The webhook's decisions (wcow_operator.webhook.decide and what it calls): sizing
arithmetic, bounds, annotations, physically backed memory, pods the runtime would fail."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.admission.pods import FROM_LIMITS, container, pod, profile, profiles
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB as MEM
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT as CPU
from wcow_contract.quantity import NANO, parse_quantity
from wcow_operator.webhook.decide import admit
from wcow_operator.webhook.decision import (
    ANNOTATION_INVALID,
    ANNOTATION_OUT_OF_BOUNDS,
    HOST_PROCESS_HYPERV,
    INVALID_QUANTITY,
    VM_TOO_LARGE,
    WINDOWS_BUILD_MISMATCH,
    Admitted,
    Refused,
)
from wcow_operator.webhook.shim_annotations import allowed_through
from wcow_operator.webhook.sizing import BASELINE_MEMORY_MB, pod_needs

SIZED = profiles(profile("hv", vm=FROM_LIMITS))
HOST = {"hostProcess": True}


def admitted(decision: Admitted | Refused) -> Admitted:
    assert isinstance(decision, Admitted), decision
    return decision


def refused(decision: Admitted | Refused) -> Refused:
    assert isinstance(decision, Refused), decision
    return decision


def sizing(decision: Admitted | Refused) -> tuple[int, int]:
    annotations = admitted(decision).pod["metadata"]["annotations"]
    return int(annotations[CPU]), int(annotations[MEM])


def test_baseline_is_the_baseline_overhead_policy_memory() -> None:
    assert BASELINE_MEMORY_MB == 512


@pytest.mark.parametrize(
    ("text", "value"),
    [("250m", Fraction(1, 4)), ("2", 2), (3, 3), ("1.5Gi", 1536 * 2**20), ("1e3", 1000),
     ("500M", 500 * 10**6), ("0.1", Fraction(1, 10))],
)  # fmt: skip
def test_parse_quantity(text: object, value: Fraction) -> None:
    assert Fraction(parse_quantity(text).value) == value


def test_sums_limits_requests_where_no_limit_and_adds_the_baseline() -> None:
    decision = admit(
        pod(
            containers=[
                container("a", limits={"cpu": "1500m", "memory": "2Gi"}),
                container("b", requests={"cpu": "1", "memory": "1000Mi"}),
                container("c"),
            ]
        ),
        SIZED,
    )
    # 2.5 cores -> 3; 2048 + 1000 MiB + 512 baseline = 3560 MB
    assert sizing(decision) == (3, 3560)
    assert admitted(decision).mutated


def test_memory_is_rounded_up_to_whole_then_even_mb() -> None:
    decision = admit(pod(containers=[container(limits={"memory": "3000001Ki"})]), SIZED)
    # 3000001 KiB = 2929.69 MiB -> 2930, + 512 = 3442 (even already); one more MiB -> odd
    assert sizing(decision)[1] == 3442
    decision = admit(pod(containers=[container(limits={"memory": "2931Mi"})]), SIZED)
    assert sizing(decision)[1] == 2931 + 512 + 1


def test_never_below_the_profile_size() -> None:
    sized = profiles(profile("hv", vm={**FROM_LIMITS, "processorCount": 4, "memoryMB": 4096}))
    decision = admit(pod(containers=[container(limits={"cpu": "100m", "memory": "64Mi"})]), sized)
    assert sizing(decision) == (4, 4096)


def test_init_containers_count_as_kubernetes_counts_them() -> None:
    app = container("app", limits={"cpu": "1", "memory": "1Gi"})
    big_init = container("migrate", limits={"cpu": "5", "memory": "3Gi"})
    sidecar = {
        **container("proxy", limits={"cpu": "2", "memory": "1Gi"}),
        "restartPolicy": "Always",
    }
    # plain init container alone is bigger than the app: max(5, 1) cores, max(3, 1) GiB
    assert sizing(admit(pod(containers=[app], init=[big_init]), SIZED)) == (5, 3072 + 512)
    # sidecar before the init container: init runs beside it (5+2); the app beside it (1+2)
    assert sizing(admit(pod(containers=[app], init=[sidecar, big_init]), SIZED)) == (
        7,
        4096 + 512,
    )
    # sidecar after the init container: the init runs alone; max(5, 1+2)
    assert sizing(admit(pod(containers=[app], init=[big_init, sidecar]), SIZED)) == (
        5,
        3072 + 512,
    )


@pytest.mark.parametrize("isolation", ["HyperV", "Process"])
@pytest.mark.parametrize("kind", ["limits", "requests"])
def test_pod_level_resources_are_refused_a_windows_pod_never_runs_with_them(
    isolation: str, kind: str
) -> None:
    """The API server forbids spec.resources for a pod with spec.os.name windows and the
    Windows kubelet rejects a pod that sets them (k8s.io/kubernetes v1.35.4
    pkg/apis/core/validation/validation.go, pkg/kubelet/lifecycle/features_windows.go):
    such a pod of a wcow class is refused with the kubelet's own reason."""
    classes = SIZED if isolation == "HyperV" else profiles(profile("hv", isolation="Process"))
    decision = refused(
        admit(
            pod(
                containers=[container(limits={"cpu": "6", "memory": "6Gi"})],
                resources={kind: {"cpu": "3", "memory": "2Gi"}},
            ),
            classes,
        )
    )
    assert decision.reason == "PodLevelResourcesNotSupported"
    assert f"spec.resources.{kind} is set" in decision.message
    assert "set the limits on its containers" in decision.message


def test_a_pod_needing_more_than_the_bounds_is_refused_naming_total_and_bound() -> None:
    decision = refused(admit(pod(containers=[container(limits={"cpu": "8500m"})]), SIZED))
    assert decision.reason == VM_TOO_LARGE
    assert "8.5 cores" in decision.message
    assert "maxProcessorCount 8" in decision.message
    decision = refused(admit(pod(containers=[container(limits={"memory": "7800Mi"})]), SIZED))
    assert "7800 MiB" in decision.message
    assert "maxMemoryMB 8192" in decision.message
    assert "8312 MB" in decision.message


def test_exactly_at_the_bounds_is_admitted() -> None:
    decision = admit(pod(containers=[container(limits={"cpu": "8", "memory": "7680Mi"})]), SIZED)
    assert sizing(decision) == (8, 8192)


def test_pods_of_other_classes_and_fixed_profiles_come_out_unchanged() -> None:
    known = profiles(profile("hv", vm=FROM_LIMITS), profile("fixed"))
    for body in (pod(runtime_class=None), pod(runtime_class="runc"), pod(runtime_class="fixed")):
        decision = admitted(admit(body, known))
        assert decision.pod == body
        assert not decision.mutated


def test_input_is_never_changed() -> None:
    body = pod(containers=[container(limits={"memory": "1Gi"})])
    before = copy.deepcopy(body)
    admit(body, SIZED)
    assert body == before


def test_admitting_twice_changes_nothing_more() -> None:
    body = pod(containers=[container(limits={"cpu": "3", "memory": "3Gi"})])
    once = admitted(admit(body, SIZED))
    twice = admitted(admit(once.pod, SIZED))
    assert twice.pod == once.pod
    assert not twice.mutated


@pytest.mark.parametrize(
    ("annotations", "words"),
    [({CPU: "9"}, f"{CPU}=9 asks for more than spec.vm.maxProcessorCount 8"),
     ({MEM: "8193"},
      f"{MEM}=8193 (rounded up to 8194) asks for more than spec.vm.maxMemoryMB 8192")],
)  # fmt: skip
def test_own_annotations_beyond_the_bounds_are_refused(
    annotations: dict[str, str], words: str
) -> None:
    decision = refused(admit(pod(annotations=annotations), SIZED))
    assert decision.reason == ANNOTATION_OUT_OF_BOUNDS
    assert words in decision.message


def test_own_annotations_within_bounds_are_kept_and_the_other_is_computed() -> None:
    body = pod(annotations={CPU: "6"}, containers=[container(limits={"cpu": "1", "memory": "2Gi"})])
    assert sizing(admit(body, SIZED)) == (6, 2048 + 512)


@pytest.mark.parametrize("value", ["four", "0", "-1", "1.5", ""])
def test_unparsable_annotations_are_refused(value: str) -> None:
    decision = refused(admit(pod(annotations={CPU: value}), SIZED))
    assert decision.reason == ANNOTATION_INVALID
    assert repr(value) in decision.message


def test_fixed_profile_bounds_annotations_its_allow_list_lets_through() -> None:
    bounded = profiles(profile("hv", vm={"maxProcessorCount": 4, "maxMemoryMB": 4096}))
    assert refused(admit(pod(annotations={CPU: "5"}), bounded)).reason == ANNOTATION_OUT_OF_BOUNDS
    ok = admitted(admit(pod(annotations={CPU: "4", MEM: "4096"}), bounded))
    assert not ok.mutated
    # the handler drops them: nothing to check, the pod comes out unchanged
    closed = profiles(profile("hv", vm={"maxProcessorCount": 4}, annotations={"pod": []}))
    assert not admitted(admit(pod(annotations={CPU: "64"}), closed)).mutated


def test_without_bounds_a_fixed_profile_lets_pods_shrink_their_vm_but_not_grow_it() -> None:
    """The default allow-list lets io.microsoft.virtualmachine.* through: without
    maxProcessorCount/maxMemoryMB the profile's own size is the most a pod may ask for."""
    sized = profiles(profile("hv", vm={"processorCount": 4, "memoryMB": 4096}))
    assert not admitted(admit(pod(annotations={CPU: "4", MEM: "2048"}), sized)).mutated
    decision = refused(admit(pod(annotations={CPU: "64"}), sized))
    assert decision.reason == ANNOTATION_OUT_OF_BOUNDS
    assert "=64" in decision.message
    assert "4 processors" in decision.message
    assert "spec.vm.maxProcessorCount" in decision.message
    decision = refused(admit(pod(annotations={MEM: "8192"}), sized))
    assert "4096 MB" in decision.message
    # processorCount unset: hcsshim's default VM (2 processors, 1024 MB) is the bound
    default = profiles(profile("hv"))
    decision = refused(admit(pod(annotations={CPU: "3"}), default))
    assert "2 processors" in decision.message
    assert "hcsshim default" in decision.message


@pytest.mark.parametrize("request_", ["-1", "1e20000000", False, "lots"])
def test_a_bad_memory_request_beside_a_limit_is_refused_naming_it(request_: object) -> None:
    """On a physically backed VM the request is read (to raise it to the limit), though the
    sizing reads only the limit: a request the API server would refuse is refused with its
    field, not replaced by the limit nor answered with an error (hypothesis found "-1")."""
    backed = profiles(profile("hv", vm={**FROM_LIMITS, "fullyPhysicallyBacked": True}))
    body = pod(containers=[container("a", limits={"memory": "1Gi"}, requests={"memory": request_})])
    decision = refused(admit(body, backed))
    assert decision.reason == INVALID_QUANTITY
    assert decision.message.startswith("spec.containers[a].resources.requests.memory: ")


def test_physically_backed_memory_requests_are_set_to_the_limits() -> None:
    backed = profiles(profile("hv", vm={**FROM_LIMITS, "fullyPhysicallyBacked": True}))
    body = pod(
        containers=[
            container("a", limits={"memory": "2Gi"}, requests={"memory": "1Gi"}),
            container("b", limits={"memory": "1Gi"}),
            container("c", requests={"memory": "512Mi"}),
            container("d", limits={"memory": "1024Mi"}, requests={"memory": "1Gi"}),
        ],
        init=[container("i", limits={"memory": "3Gi"}, requests={"memory": "100Mi"})],
    )
    result = admitted(admit(body, backed))
    spec = result.pod["spec"]
    assert [c["resources"]["requests"]["memory"] for c in spec["containers"]] == [
        "2Gi",
        "1Gi",
        "512Mi",
        "1Gi",  # equal in value already: left as written
    ]
    assert spec["initContainers"][0]["resources"]["requests"]["memory"] == "3Gi"
    assert sizing(result) == (2, 2048 + 1024 + 512 + 1024 + 512)


def test_host_process_with_hyperv_is_refused() -> None:
    for spec in (
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
        {
            "containers": [
                {"name": "x", "securityContext": {"windowsOptions": {"hostProcess": True}}}
            ]
        },
    ):
        decision = refused(admit(pod(**spec), profiles(profile("hv"))))
        assert decision.reason == HOST_PROCESS_HYPERV
        assert "hostProcess" in decision.message


def test_process_class_refuses_a_build_pin_that_cannot_run_its_images() -> None:
    process = profiles(profile("proc", isolation="Process", windowsBuild="ltsc2019"))
    decision = refused(
        admit(pod("proc", nodeSelector={"node.kubernetes.io/windows-build": "10.0.20348"}), process)
    )
    assert decision.reason == WINDOWS_BUILD_MISMATCH
    assert "10.0.20348" in decision.message
    assert "10.0.17763" in decision.message
    same = pod("proc", nodeSelector={"node.kubernetes.io/windows-build": "10.0.17763"})
    assert not admitted(admit(same, process)).mutated
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "node.kubernetes.io/windows-build",
                                "operator": "In",
                                "values": ["10.0.20348"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    assert refused(admit(pod("proc", affinity=affinity), process)).reason == WINDOWS_BUILD_MISMATCH
    either = copy.deepcopy(affinity)
    terms = either["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"].append("10.0.17763")
    assert isinstance(admit(pod("proc", affinity=either), process), Admitted)


def test_a_bad_quantity_is_refused_naming_the_field() -> None:
    decision = refused(admit(pod(containers=[container(limits={"cpu": "lots"})]), SIZED))
    assert decision.reason == INVALID_QUANTITY
    assert "spec.containers[app].resources.limits.cpu" in decision.message


@pytest.mark.parametrize(
    ("patterns", "allowed"),
    [(["io.microsoft.virtualmachine.*"], True), ([], False), (["io.microsoft.container.*"], False),
     (["io.microsoft.virtualmachine.computetopology.processor.[cd]ount"], True),
     (["io.microsoft.virtualmachine.computetopology.processor.[^c]ount"], False),
     (["*"], True), (["io.microsoft.virtualmachine.computetopology.processor.count"], True)],
)  # fmt: skip
def test_allow_list_matching_is_go_path_match(patterns: list[str], allowed: bool) -> None:
    assert allowed_through(CPU, patterns) is allowed


# -- properties -------------------------------------------------------------------------------

cpu_text = st.integers(0, 12000).map(lambda m: f"{m}m")
mem_text = st.integers(0, 12 * 1024).map(lambda m: f"{m}Mi")


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kind in ("limits", "requests"):
        values = {}
        if draw(st.booleans()):
            values["cpu"] = draw(cpu_text)
        if draw(st.booleans()):
            values["memory"] = draw(mem_text)
        if values:
            found[kind] = values
    return found


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    apps = [container(f"c{i}", **draw(resources())) for i in range(draw(st.integers(1, 4)))]
    inits = []
    for i in range(draw(st.integers(0, 3))):
        item = container(f"i{i}", **draw(resources()))
        if draw(st.booleans()):
            item["restartPolicy"] = "Always"
        inits.append(item)
    return pod(containers=apps, init=inits)


vms = st.fixed_dictionaries(
    {
        "sizing": st.just("FromPodLimits"),
        "processorCount": st.integers(1, 8),
        "memoryMB": st.integers(128, 4096).map(lambda n: n * 2),
        "fullyPhysicallyBacked": st.booleans(),
    }
).flatmap(
    lambda vm: st.fixed_dictionaries(
        {
            **{k: st.just(v) for k, v in vm.items()},
            "maxProcessorCount": st.integers(vm["processorCount"], 16),
            "maxMemoryMB": st.integers(vm["memoryMB"] // 2, 16384).map(lambda n: n * 2),
        }
    )
)


def _memory_requests_equal_limits(admitted_pod: dict[str, Any]) -> bool:
    spec = admitted_pod["spec"]
    for item in spec.get("initContainers", []) + spec["containers"]:
        res = item.get("resources", {})
        limit = res.get("limits", {}).get("memory")
        if limit is None:
            continue
        if parse_quantity(res["requests"]["memory"]).nanos != parse_quantity(limit).nanos:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(body=pods(), vm=vms)
def test_sizing_properties(body: dict[str, Any], vm: dict[str, Any]) -> None:
    prof = profile("hv", vm=vm)
    decision = admit(body, {"hv": prof})
    needs = pod_needs(body)
    if isinstance(decision, Refused):
        assert decision.reason == VM_TOO_LARGE
        too_many_cpus = needs.processors > vm["maxProcessorCount"]
        too_much_memory = needs.memory_mib + BASELINE_MEMORY_MB > vm["maxMemoryMB"]
        assert too_many_cpus or too_much_memory
        return
    processors, memory = sizing(decision)
    assert vm["processorCount"] <= processors <= vm["maxProcessorCount"]
    assert vm["memoryMB"] <= memory <= vm["maxMemoryMB"]
    assert memory % 2 == 0
    assert processors * NANO >= needs.cpu_nanos
    assert (memory - BASELINE_MEMORY_MB) * 2**20 * NANO >= needs.memory_nanos
    if vm["fullyPhysicallyBacked"]:
        assert _memory_requests_equal_limits(decision.pod)
        # the node is charged (requests) what the VM's containers may use (limits)
        assert pod_needs(decision.pod) == needs
