"""Validation rules of WindowsRuntimeProfile: each bad input names its field and value."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import MakeProfile, profile_document
from wcow_contract.catalog.windows_builds import (
    OLDEST_BUILD,
    WINDOWS_BUILD_PATTERN,
    WindowsBuild,
    hyperv_can_run,
    parse_windows_build,
    process_can_run,
)
from wcow_contract.errors import ProfileInvalidError, parse_profile


def problems(name: str = "hv", **spec: Any) -> list[str]:
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(profile_document(name, **spec))
    return [str(problem) for problem in caught.value.problems]


def only_problem(name: str = "hv", **spec: Any) -> str:
    found = problems(name, **spec)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("alias", "build"),
    [
        ("ltsc2016", 14393),
        ("1809", 17763),
        ("ltsc2019", 17763),
        ("1903", 18362),
        ("1909", 18363),
        ("2004", 19041),
        ("20H2", 19042),
        ("20h2", 19042),
        ("ltsc2022", 20348),
        ("LTSC2022", 20348),
        ("23H2", 25398),
        ("ltsc2025", 26100),
        ("10.0.20348", 20348),
        ("10.0.99999", 99999),
    ],
)
def test_windows_build_aliases_resolve_to_kubelet_build_numbers(alias: str, build: int) -> None:
    assert parse_windows_build(alias) == WindowsBuild(build)
    assert parse_windows_build(alias).label_value == f"10.0.{build}"


@pytest.mark.parametrize("bad", ["2022", "10.0.1234", "10.0.20348.1", "ltsc2020", "", "10.0.9999"])
def test_unknown_windows_builds_are_refused_with_the_accepted_forms(bad: str) -> None:
    message = only_problem(windowsBuild=bad)
    assert message.startswith("spec.windowsBuild:")
    assert repr(bad) in message


def test_a_build_before_ws2016_is_refused() -> None:
    assert "older than Windows Server 2016" in only_problem(windowsBuild="10.0.10240")


def test_the_crd_pattern_takes_exactly_the_builds_the_model_takes() -> None:
    """The API server refuses 10.0.14392 as the model does (it used to take any 5 digits)."""
    for number in range(100000):
        build = f"10.0.{number:05d}"
        taken = re.fullmatch(WINDOWS_BUILD_PATTERN, build) is not None
        assert taken == (number >= OLDEST_BUILD), build


def test_hyperv_runs_guests_up_to_the_host_build() -> None:
    ws2022 = WindowsBuild(20348)
    assert hyperv_can_run(ws2022, WindowsBuild(17763))
    assert hyperv_can_run(ws2022, ws2022)
    assert not hyperv_can_run(ws2022, WindowsBuild(26100))


def test_process_isolation_matches_builds_as_hcsshim_does() -> None:
    assert process_can_run(WindowsBuild(17763), WindowsBuild(17763))
    assert not process_can_run(WindowsBuild(20348), WindowsBuild(17763))
    assert process_can_run(WindowsBuild(26100), WindowsBuild(20348))  # WS2025 runs ltsc2022
    assert not process_can_run(WindowsBuild(26100), WindowsBuild(17763))
    assert not process_can_run(WindowsBuild(17763), WindowsBuild(20348))
    assert not process_can_run(WindowsBuild(20348), WindowsBuild(26100))


def test_isolation_is_required_and_closed() -> None:
    doc = profile_document()
    del doc["spec"]["isolation"]
    with pytest.raises(ProfileInvalidError, match=r"spec\.isolation: is required"):
        parse_profile(doc)
    message = only_problem(isolation="Hyperv")
    assert message.startswith("spec.isolation:")
    assert "'Hyperv'" in message


def test_vm_is_only_for_hyperv() -> None:
    message = only_problem(isolation="Process", vm={"processorCount": 2})
    assert message.startswith("spec.vm: is only valid with isolation HyperV")


def test_hyperv_needs_a_guest_build() -> None:
    doc = profile_document()
    del doc["spec"]["windowsBuild"]
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(doc)
    assert str(caught.value.problems[0]).startswith("spec.windowsBuild: is required with")


def test_process_without_a_build_is_fine(make_profile: MakeProfile) -> None:
    assert make_profile(isolation="Process", windowsBuild=None).spec.guest_build is None


def test_odd_vm_memory_is_refused_with_the_even_value_to_use() -> None:
    message = only_problem(vm={"memoryMB": 2047})
    assert message.startswith("spec.vm.memoryMB:")
    assert "write 2048" in message
    assert "(got 2047)" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memoryMB", 128),
        ("processorCount", 0),
        ("processorLimit", 100001),
        ("processorWeight", -1),
    ],
)
def test_vm_sizes_out_of_range_name_the_field(field: str, value: int) -> None:
    message = only_problem(vm={field: value})
    assert message.startswith(f"spec.vm.{field}:")
    assert f"(got {value})" in message


@pytest.mark.parametrize(
    "handler", ["Has-Upper", "under_score", "-lead", "trail-", "a" * 64, "dots.in.it"]
)
def test_handler_must_be_a_dns_label(handler: str) -> None:
    assert only_problem(handler=handler).startswith("spec.handler:")


def test_a_dotted_profile_name_needs_an_explicit_handler(make_profile: MakeProfile) -> None:
    message = only_problem(name="hyperv.ltsc2022")
    assert message.startswith("spec.handler: is needed because metadata.name")
    assert make_profile("hyperv.ltsc2022", handler="hyperv-ltsc2022").handler == "hyperv-ltsc2022"


def test_profile_name_must_be_a_dns_subdomain() -> None:
    assert only_problem(name="Upper").startswith("metadata.name:")


@pytest.mark.parametrize("quantity", ["-1", "1.5.2", "12Q", "abc", True])
def test_overhead_quantities_must_be_kubernetes_quantities(quantity: object) -> None:
    message = only_problem(overhead={"podFixed": {"memory": quantity}})
    assert message.startswith("spec.overhead.podFixed.memory:")


def test_overhead_accepts_quantities_as_numbers_and_strings(make_profile: MakeProfile) -> None:
    profile = make_profile(overhead={"podFixed": {"cpu": 1, "memory": "1.5Gi"}})
    assert profile.spec.effective_overhead() == {
        "cpu": "1",
        "memory": "1536Mi",
    }  # as the API server stores it


def test_overhead_resource_names_are_cpu_and_memory() -> None:
    message = only_problem(overhead={"podFixed": {"gpu": "1"}})
    assert message.startswith("spec.overhead.podFixed.gpu: is not a field")


def test_overhead_podfixed_and_policy_are_exclusive() -> None:
    message = only_problem(overhead={"podFixed": {"cpu": "1"}, "policy": "Baseline"})
    assert message.startswith("spec.overhead.policy: set either podFixed or policy")


def test_vm_overhead_policies_need_hyperv() -> None:
    message = only_problem(isolation="Process", overhead={"policy": "WholeVM"})
    assert message.startswith("spec.overhead.policy: WholeVM prices a utility VM")


def test_unknown_fields_are_refused_as_misspelt() -> None:
    message = only_problem(vm={"memoryMb": 2048})
    assert message.startswith("spec.vm.memoryMb: is not a field")


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("sandbox_isolation", None),  # refused as a first-class field instead
        ("ScrubLog", "ScrubLogs"),
        ("nc_proxy_addr", "NCProxyAddr"),
        ("ScaleCPULimitsToSandbox", None),  # other casings: tests/unit/test_honest_fields.py
    ],
)
def test_misspelt_runhcs_options_are_refused_with_the_right_spelling(
    key: str, suggestion: str | None
) -> None:
    message = only_problem(containerd={"options": {key: True}})
    assert message.startswith(f"spec.containerd.options.{key}:")
    if suggestion is not None:
        assert f"did you mean {suggestion!r}" in message
        assert "silently ignore" in message


@pytest.mark.parametrize(
    ("key", "advice"),
    [
        ("SandboxIsolation", "spec.isolation"),
        ("VmMemorySizeInMb", "spec.vm.memoryMB"),
        ("VmProcessorCount", "spec.vm.processorCount"),
        ("SandboxImage", "pinned_images.sandbox"),
        ("NoInheritHostTimezone", "inheritHostTimezone"),
        ("DefaultContainerScratchSizeInGb", "no hcsshim release reads"),
        ("ScaleCpuLimitsToSandbox", "spec.vm.scaleCpuLimitsToSandbox"),
    ],
)
def test_options_with_a_field_of_their_own_or_no_effect_are_refused(key: str, advice: str) -> None:
    message = only_problem(containerd={"options": {key: 1}})
    assert message.startswith(f"spec.containerd.options.{key}:")
    assert advice in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ScrubLogs", "yes"),
        ("NCProxyAddr", 5),
        ("DefaultContainerAnnotations", {"a": 1}),
        ("DefaultContainerAnnotations", ["a"]),
    ],
)
def test_option_values_must_have_the_go_type(key: str, value: object) -> None:
    message = only_problem(containerd={"options": {key: value}})
    assert message.startswith(f"spec.containerd.options.{key}:")


def test_default_annotations_may_not_contradict_vm_fields() -> None:
    message = only_problem(
        vm={"fullyPhysicallyBacked": True},
        containerd={
            "options": {
                "DefaultContainerAnnotations": {
                    "io.microsoft.virtualmachine.fullyphysicallybacked": "false"
                }
            }
        },
    )
    assert "spec.containerd.options.DefaultContainerAnnotations" in message


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        ({"kubernetes.io/os": "linux"}, "spec.scheduling.nodeSelector[kubernetes.io/os]"),
        ({"runtime.wcow.dev/hv": "ready"}, "spec.scheduling.nodeSelector[runtime.wcow.dev/hv]"),
        ({"bad key!": "x"}, "spec.scheduling.nodeSelector[bad key!]"),
        ({"ok": "bad value!"}, "spec.scheduling.nodeSelector.ok"),
    ],
)
def test_node_selector_labels_are_checked(selector: dict[str, str], field: str) -> None:
    assert only_problem(scheduling={"nodeSelector": selector}).startswith(f"{field}:")


def test_node_selector_arch_must_match_the_sandbox_platform() -> None:
    message = only_problem(scheduling={"nodeSelector": {"kubernetes.io/arch": "arm64"}})
    assert "kubernetes.io/arch" in message
    assert "windows/amd64" in message


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"key": "os", "operator": "Exists", "value": "windows"}, "value"),
        ({"key": "os", "effect": "NoSchedule", "tolerationSeconds": 5}, "tolerationSeconds"),
        ({"operator": "Equal", "value": "x"}, "operator"),
        ({"key": "os", "effect": "Sometimes"}, "effect"),
    ],
)
def test_tolerations_follow_the_core_api_rules(toleration: dict[str, Any], field: str) -> None:
    message = only_problem(scheduling={"tolerations": [toleration]})
    assert message.startswith(f"spec.scheduling.tolerations[0].{field}:")


def test_contradicting_build_pin_is_refused_without_gating() -> None:
    message = only_problem(
        isolation="Process",
        scheduling={
            "requireReadyLabel": False,
            "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.17763"},
        },
    )
    assert "contradicts windowsBuild" in message


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = problems(handler="Bad_Handler", vm={"memoryMB": 3}, canary={"timeoutSeconds": 1})
    fields = sorted(p.split(":", 1)[0] for p in found)
    assert fields == ["spec.canary.timeoutSeconds", "spec.handler", "spec.vm.memoryMB"]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2048Mi", "2Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("100m", "100m"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("0.5Ki", "512"),
        ("1e3", "1e3"),
        ("0", "0"),
    ],
)
def test_overhead_is_rendered_as_the_api_server_stores_it(
    make_profile: MakeProfile, given: str, stored: str
) -> None:
    # apimachinery's Quantity.String(); anything else would make every resync a write.
    assert make_profile(overhead={"podFixed": {"memory": given}}).spec.effective_overhead() == {
        "memory": stored
    }


# ---- as strict as the CRD's schema: the API server refuses these, so the model does too ----


@pytest.mark.parametrize(
    ("spec", "field", "shown"),
    [
        ({"vm": {"memoryMB": "4096"}}, "spec.vm.memoryMB", "'4096'"),
        ({"vm": {"processorCount": "2"}}, "spec.vm.processorCount", "'2'"),
        ({"vm": {"processorCount": 2.0}}, "spec.vm.processorCount", "2.0"),
        ({"vm": {"processorCount": True}}, "spec.vm.processorCount", "True"),
        ({"vm": {"fullyPhysicallyBacked": "yes"}}, "spec.vm.fullyPhysicallyBacked", "'yes'"),
        ({"vm": {"fullyPhysicallyBacked": "true"}}, "spec.vm.fullyPhysicallyBacked", "'true'"),
        ({"vm": {"inheritHostTimezone": 0}}, "spec.vm.inheritHostTimezone", "0"),
        ({"canary": {"timeoutSeconds": "60"}}, "spec.canary.timeoutSeconds", "'60'"),
        ({"canary": {"enabled": 1}}, "spec.canary.enabled", "1"),
        ({"containerd": {"debug": "on"}}, "spec.containerd.debug", "'on'"),
        (
            {
                "scheduling": {
                    "tolerations": [{"key": "a", "effect": "NoExecute", "tolerationSeconds": "5"}]
                }
            },
            "spec.scheduling.tolerations[0].tolerationSeconds",
            "'5'",
        ),
    ],
)
def test_strings_floats_and_numbers_are_not_coerced(
    spec: dict[str, Any], field: str, shown: str
) -> None:
    message = only_problem(**spec)
    assert message.startswith(f"{field}: must be ")
    assert message.endswith(f"(got {shown})")


def test_a_string_for_a_boolean_says_what_to_write() -> None:
    message = only_problem(vm={"fullyPhysicallyBacked": "yes"})
    assert message == (
        "spec.vm.fullyPhysicallyBacked: must be true or false, without quotes, not a string "
        "(got 'yes')"
    )


@pytest.mark.parametrize("quantity", [1, "1", 0, 2**63 - 1, "250m"])
def test_quantities_are_integers_or_strings_as_in_kubernetes(
    make_profile: MakeProfile, quantity: object
) -> None:
    make_profile(overhead={"podFixed": {"cpu": quantity}})


@pytest.mark.parametrize("quantity", [1.0, 0.5, -1, 2**63, False, [], {}])
def test_quantities_of_other_json_types_or_out_of_int64_are_refused(quantity: object) -> None:
    assert only_problem(overhead={"podFixed": {"cpu": quantity}}).startswith(
        "spec.overhead.podFixed.cpu: "
    )


def test_toleration_seconds_is_an_int64() -> None:
    toleration = {"key": "a", "effect": "NoExecute", "tolerationSeconds": 2**63}
    message = only_problem(scheduling={"tolerations": [toleration]})
    assert message.startswith("spec.scheduling.tolerations[0].tolerationSeconds:")


@pytest.mark.parametrize(
    ("spec", "as_stored"),
    [
        ({"sandbox": None}, {}),
        ({"sandbox": {}}, {}),
        ({"sandbox": {"platform": None, "image": None}}, {}),
        ({"vm": {"memoryMB": None, "fullyPhysicallyBacked": None}}, {"vm": {}}),
        (
            {"scheduling": {"nodeSelector": {"example.com/pool": None}, "tolerations": None}},
            {"scheduling": {"nodeSelector": {}}},
        ),
        (
            {
                "containerd": {
                    "options": {"ScrubLogs": None, "DefaultContainerAnnotations": {"a": None}}
                }
            },
            {"containerd": {"options": {"DefaultContainerAnnotations": {}}}},
        ),
        ({"rollout": {"maxUnavailable": None}}, {}),
    ],
)
def test_null_is_absent_as_the_api_server_prunes_it(
    make_profile: MakeProfile, spec: dict[str, Any], as_stored: dict[str, Any]
) -> None:
    assert make_profile(**spec).spec == make_profile(**as_stored).spec


def test_null_does_not_hide_an_unknown_field() -> None:
    # The API server refuses an unknown field whatever its value (strict field validation).
    assert only_problem(vm={"memoryMb": None}).startswith("spec.vm.memoryMb: is not a field")
    assert only_problem(containerd={"options": {"Debug": None}}).startswith(
        "spec.containerd.options.Debug:"
    )


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"labels": {"bad key!": "x"}}, "metadata.labels[bad key!]"),
        ({"labels": {"ok": "bad value!"}}, "metadata.labels.ok"),
        ({"labels": {"ok": 1}}, "metadata.labels.ok"),
        ({"annotations": {"/x": "y"}}, "metadata.annotations"),
        ({"annotations": {"a": "x" * (256 * 1024)}}, "metadata.annotations"),
    ],
)
def test_labels_and_annotations_are_checked_as_the_api_server_does(
    metadata: dict[str, Any], field: str
) -> None:
    document = profile_document()
    document["metadata"].update(metadata)
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(document)
    (problem,) = caught.value.problems
    assert str(problem).startswith(f"{field}:")
    assert len(str(problem)) < 1000  # the 256 KiB value is not echoed back whole


def test_annotation_keys_are_judged_lowercased_as_go_does() -> None:
    document = profile_document()
    document["metadata"]["annotations"] = {"Example.COM/Key": "x", "\u0130": "dotted capital I"}
    parse_profile(document)  # Go's ToLower maps U+0130 to 'i'
