"""What a valid profile may make a node run: the model's limits on the
fields containerd and hcsshim turn into executables, paths, pipes and defaults for every pod.

A plan can carry only what a valid profile renders (tests/agent/test_plan_trust.py), so these
limits are what anyone who can write the plan is held to."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import profile_document
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.wire.runtime_table import runtime_table

SHIM = "containerd-shim-runhcs-v1.exe"


def refusal(**spec: Any) -> str:
    with pytest.raises(ProfileInvalidError) as raised:
        parse_profile(profile_document("hv", **spec))
    return str(raised.value)


def options(**values: Any) -> dict[str, Any]:
    return {"containerd": {"options": values}}


@pytest.mark.parametrize(
    "path",
    [
        r"C:\Windows\Temp\evil.exe",
        rf"C:\Windows\Temp\{SHIM}",
        rf"\\attacker.example\share\{SHIM}",
        rf"\\?\C:\Program Files\{SHIM}",
        rf"C:\Program Files\..\Windows\Temp\{SHIM}",
        rf"C:\Program Files\containerd\.\{SHIM}",
        r"C:\Program Files\containerd\pwsh.exe",
        rf"C:\Program Files\containerd\{SHIM}:stream",
        rf"C:/Program Files/containerd/{SHIM}",
        SHIM,
    ],
)
def test_runtime_path_is_only_the_runhcs_shim_under_program_files(path: str) -> None:
    message = refusal(containerd={"runtimePath": path})
    assert "spec.containerd.runtimePath: is not a runhcs shim under Program Files" in message


@pytest.mark.parametrize(
    "path",
    [
        rf"C:\Program Files\containerd\{SHIM}",
        rf"D:\Program Files\hcsshim v0.15 (rc.4)\bin\{SHIM}",
    ],
)
def test_a_runhcs_shim_under_program_files_is_rendered(path: str) -> None:
    profile = parse_profile(profile_document("hv", containerd={"runtimePath": path}))
    assert runtime_table(profile)["runtime_path"] == path


@pytest.mark.parametrize(
    "runtime_type", ["io.containerd.runc.v2", "io.containerd.evil.v1", r"C:\evil.exe", ""]
)
def test_only_the_runhcs_runtime_type(runtime_type: str) -> None:
    message = refusal(containerd={"runtimeType": runtime_type})
    assert "spec.containerd.runtimeType: is not supported: only io.containerd.runhcs.v1" in message


def test_boot_files_are_refused_for_windows_containers() -> None:
    message = refusal(**options(BootFilesRootPath=r"C:\Program Files\boot"))
    assert "option 'BootFilesRootPath' may not be set here" in message
    assert "LCOW" in message


@pytest.mark.parametrize(
    "address",
    [
        r"\\attacker.example\pipe\ncproxy",
        r"\\.\pipe\..\..\C:\x",
        r"\\.\C:\Windows",
        "127.0.0.1:6669",
        r"\\.\pipe\ncproxy" + "\n",
    ],
)
def test_ncproxy_is_a_pipe_on_this_host(address: str) -> None:
    message = refusal(**options(NCProxyAddr=address))
    assert "spec.containerd.options.NCProxyAddr: option 'NCProxyAddr'" in message
    assert "is not a named pipe on this host" in message


def test_the_default_ncproxy_pipe_is_rendered() -> None:
    profile = parse_profile(
        profile_document("hv", **options(NCProxyAddr=r"\\.\pipe\ncproxy-ttrpc"))
    )
    assert runtime_table(profile)["options"]["NCProxyAddr"] == r"\\.\pipe\ncproxy-ttrpc"


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("microsoft.com/hostprocess-inherit-user", "SYSTEM token"),
        ("microsoft.com/hostprocess-container", "HostProcess family"),
        ("microsoft.com/hostprocess-rootfs-location", "HostProcess family"),
        ("io.microsoft.virtualmachine.computetopology.processor.count", "spec.vm.processorCount"),
        ("io.microsoft.virtualmachine.computetopology.memory.sizeinmb", "spec.vm.memoryMB"),
        ("io.microsoft.virtualmachine.fullyphysicallybacked", "spec.vm.fullyPhysicallyBacked"),
        ("io.microsoft.virtualmachine.computetopology.memory.allowovercommit", "physical"),
        ("io.microsoft.virtualmachine.computetopology.processor.limit", "spec.vm.processorLimit"),
        ("io.microsoft.virtualmachine.wcow.timezone.noinherit", "spec.vm.inheritHostTimezone"),
        ("io.microsoft.virtualmachine.dump-directory-path", "crash dumps"),
        ("io.microsoft.virtualmachine.kerneldrivers", "drivers"),
        ("io.microsoft.virtualmachine.bootfilesrootpath", "boots from"),
        ("io.microsoft.container.wcow.deviceextensions", "host devices"),
        ("io.microsoft.network.ncproxy", "NCProxyAddr"),
    ],
)
def test_default_annotations_may_not_move_the_boundary(key: str, instead: str) -> None:
    message = refusal(**options(DefaultContainerAnnotations={key: "true"}))
    assert "spec.containerd.options.DefaultContainerAnnotations" in message
    assert f"may not set {key!r}, which it would add to every pod" in message
    assert instead in message


def test_harmless_default_annotations_are_rendered() -> None:
    defaults = {
        "io.microsoft.container.processdumplocation": r"C:\dumps",
        "microsoft.com/disable-hostprocess-container": "true",
        "io.microsoft.virtualmachine.fileshares.disablewritable": "true",
    }
    profile = parse_profile(
        profile_document(
            "hv", vm={"processorLimit": 50000}, **options(DefaultContainerAnnotations=defaults)
        )
    )
    rendered = runtime_table(profile)["options"]["DefaultContainerAnnotations"]
    assert rendered == {
        **defaults,
        "io.microsoft.virtualmachine.computetopology.processor.limit": "50000",
    }


@pytest.mark.parametrize(
    "image",
    ["evil\n[plugins]", "Registry/Image", "a b", "x:y:z", "image@sha256:abc", "a" * 600],
)
def test_the_canary_image_is_an_image_reference(image: str) -> None:
    message = refusal(canary={"image": image})
    assert "spec.canary.image: is not an image reference" in message
    assert "\n[plugins]" not in message  # echoed escaped, as repr


@pytest.mark.parametrize(
    "image",
    [
        "mcr.microsoft.com/windows/nanoserver:ltsc2022",
        "localhost:5000/canary@sha256:" + "0" * 64,
        "nanoserver",
    ],
)
def test_image_references_are_accepted(image: str) -> None:
    assert parse_profile(profile_document("hv", canary={"image": image})).spec.canary.image == image
