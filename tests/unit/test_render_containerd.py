"""The containerd handler tables: every key and value as containerd and hcsshim read them."""

from __future__ import annotations

import tomllib

import pytest

from tests.conftest import MakeProfile
from wcow_contract.wire.runtime_table import RUNTIMES_PATH, runtime_table
from wcow_operator.render.containerd import render_containerd_toml


def options_of(make_profile: MakeProfile, **spec: object) -> dict[str, object]:
    table = runtime_table(make_profile(**spec))
    options = table["options"]
    assert isinstance(options, dict)
    return options


def test_hyperv_handler_uses_go_field_names_and_integer_enums(make_profile: MakeProfile) -> None:
    profile = make_profile(
        vm={"processorCount": 4, "memoryMB": 8192},
    )
    table = runtime_table(profile)
    assert table == {
        "runtime_type": "io.containerd.runhcs.v1",
        "pod_annotations": ["io.microsoft.virtualmachine.*"],
        "container_annotations": ["io.microsoft.container.*"],
        "options": {
            "SandboxIsolation": 1,
            "SandboxPlatform": "windows/amd64",
            "VmProcessorCount": 4,
            "VmMemorySizeInMb": 8192,
            "ScaleCpuLimitsToSandbox": True,
        },
    }


def test_hyperv_without_vm_gets_hcsshims_default_size_written_out(
    make_profile: MakeProfile,
) -> None:
    options = options_of(make_profile)
    assert options["VmProcessorCount"] == 2
    assert options["VmMemorySizeInMb"] == 1024


def test_process_handler_has_no_vm_options_and_no_pod_annotations(
    make_profile: MakeProfile,
) -> None:
    table = runtime_table(make_profile(isolation="Process"))
    assert table == {
        "runtime_type": "io.containerd.runhcs.v1",
        "container_annotations": ["io.microsoft.container.*"],
        "options": {"SandboxIsolation": 0, "SandboxPlatform": "windows/amd64"},
    }


def test_vm_settings_without_runhcs_options_become_default_annotations(
    make_profile: MakeProfile,
) -> None:
    options = options_of(
        make_profile,
        vm={
            "processorLimit": 50000,
            "processorWeight": 200,
            "fullyPhysicallyBacked": True,
            "inheritHostTimezone": False,
            "scaleCpuLimitsToSandbox": False,
        },
    )
    assert options["ScaleCpuLimitsToSandbox"] is False
    assert options["DefaultContainerAnnotations"] == {
        "io.microsoft.virtualmachine.computetopology.processor.limit": "50000",
        "io.microsoft.virtualmachine.computetopology.processor.weight": "200",
        "io.microsoft.virtualmachine.fullyphysicallybacked": "true",
        "io.microsoft.virtualmachine.wcow.timezone.noinherit": "true",
    }


def test_user_default_annotations_merge_with_the_vm_ones(make_profile: MakeProfile) -> None:
    options = options_of(
        make_profile,
        vm={"processorWeight": 50},
        containerd={"options": {"DefaultContainerAnnotations": {"io.microsoft.x": "1"}}},
    )
    assert options["DefaultContainerAnnotations"] == {
        "io.microsoft.virtualmachine.computetopology.processor.weight": "50",
        "io.microsoft.x": "1",
    }


def test_shim_debug_settings(make_profile: MakeProfile) -> None:
    options = options_of(
        make_profile,
        containerd={
            "debug": True,
            "debugType": "Etw",
            "logLevel": "trace",
            "ioRetryTimeoutSeconds": 0,
            "options": {"ScrubLogs": False, "NCProxyAddr": "\\\\.\\pipe\\ncproxy"},
        },
    )
    assert options["Debug"] is True
    assert options["DebugType"] == 2
    assert options["LogLevel"] == "trace"
    assert options["IoRetryTimeoutInSec"] == 0
    assert options["ScrubLogs"] is False
    assert options["NCProxyAddr"] == "\\\\.\\pipe\\ncproxy"


def test_annotation_lists_can_be_replaced_or_emptied(make_profile: MakeProfile) -> None:
    table = runtime_table(make_profile(annotations={"pod": [], "container": ["a.*", "b"]}))
    assert "pod_annotations" not in table
    assert table["container_annotations"] == ["a.*", "b"]


def test_runtime_type_and_path(make_profile: MakeProfile) -> None:
    shim = "D:\\Program Files\\hcsshim v0.15 (rc.4)\\containerd-shim-runhcs-v1.exe"
    table = runtime_table(
        make_profile(containerd={"runtimeType": "io.containerd.runhcs.v1", "runtimePath": shim})
    )
    assert table["runtime_type"] == "io.containerd.runhcs.v1"
    assert table["runtime_path"] == shim


@pytest.mark.parametrize(
    ("version", "plugin"),
    [
        (2, "io.containerd.grpc.v1.cri"),
        (3, "io.containerd.cri.v1.runtime"),
        (4, "io.containerd.cri.v1.runtime"),
    ],
)
def test_toml_puts_handlers_at_the_path_of_the_config_version(
    make_profile: MakeProfile, version: int, plugin: str
) -> None:
    profile = make_profile()
    text = render_containerd_toml({"hv": runtime_table(profile)}, version)
    parsed = tomllib.loads(text)
    assert parsed["version"] == version
    assert RUNTIMES_PATH[version][1] == plugin
    handler = parsed["plugins"][plugin]["containerd"]["runtimes"]["hv"]
    assert handler == runtime_table(profile)
    assert f'[plugins."{plugin}".containerd.runtimes.hv.options]' in text
    assert "SandboxIsolation = 1\n" in text  # an integer, not the string "HYPERVISOR"


def test_unsupported_config_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version 1 is not supported"):
        render_containerd_toml({}, 1)


def test_toml_is_deterministic_whatever_the_input_order(make_profile: MakeProfile) -> None:
    a = runtime_table(make_profile("a"))
    b = runtime_table(make_profile("b", isolation="Process"))
    assert render_containerd_toml({"a": a, "b": b}, 2) == render_containerd_toml(
        {"b": b, "a": a}, 2
    )
