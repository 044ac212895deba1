"""computecore.dll through ctypes: signatures as Microsoft's reference gives them, and the
calls made the way the HCS docs ask (operations closed, documents freed, handles closed)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import FakeComputeCore, FakeNode
from wcow_agent.host.computecore import (
    COMPUTECORE_SIGNATURES,
    GENERIC_ALL,
    HCS_E_OPERATION_TIMEOUT,
    KERNEL32_SIGNATURES,
    ComputeCore,
    hresult_name,
    load_computecore,
)
from wcow_agent.host.interfaces import HcsError
from wcow_agent.simulator.hcs import VmSize

# The computecore.dll C API as Microsoft's Host Compute System API reference documents it
# (MicrosoftDocs/Virtualization-Documentation, virtualization/api/hcs/Reference/*.md):
# parameters in order, then the return.
REFERENCE = {
    "HcsCreateOperation": (["void*", "HCS_OPERATION_COMPLETION"], "HCS_OPERATION"),
    "HcsCloseOperation": (["HCS_OPERATION"], "void"),
    "HcsEnumerateComputeSystems": (["PCWSTR", "HCS_OPERATION"], "HRESULT"),
    "HcsOpenComputeSystem": (["PCWSTR", "DWORD", "HCS_SYSTEM*"], "HRESULT"),
    "HcsGetComputeSystemProperties": (["HCS_SYSTEM", "HCS_OPERATION", "PCWSTR"], "HRESULT"),
    "HcsWaitForOperationResult": (["HCS_OPERATION", "DWORD", "PWSTR*"], "HRESULT"),
    "HcsCloseComputeSystem": (["HCS_SYSTEM"], "void"),
    "HcsGetServiceProperties": (["PCWSTR", "PWSTR*"], "HRESULT"),
    "HcsCancelOperation": (["HCS_OPERATION"], "HRESULT"),
}
# Win32: HLOCAL LocalFree(HLOCAL hMem), what the HCS docs free result documents with.
KERNEL32_REFERENCE = {"LocalFree": (["HLOCAL"], "HLOCAL")}


def _is_pointer_to_void_pointer(ctype: Any) -> bool:
    return getattr(ctype, "_type_", None) is ctypes.c_void_p


def _int32(ctype: Any, signed: bool) -> bool:
    return (
        isinstance(ctype, type)
        and issubclass(ctype, ctypes._SimpleCData)
        and ctypes.sizeof(ctype) == 4
        and (ctype(-1).value < 0) == signed
    )


def matches(c_type: str, ctype: Any) -> bool:
    """Whether a ctypes type is right for a C type as it is on Windows x64."""
    if c_type == "void":
        return ctype is None
    if c_type in ("void*", "HCS_OPERATION", "HCS_SYSTEM", "HCS_OPERATION_COMPLETION", "HLOCAL"):
        return ctype is ctypes.c_void_p  # handles and opaque pointers: pointer-sized
    if c_type == "PCWSTR":
        return ctype is ctypes.c_wchar_p  # input strings: ctypes converts str
    if c_type in ("PWSTR*", "HCS_SYSTEM*"):
        return _is_pointer_to_void_pointer(ctype)  # out: keep the raw pointer/handle
    if c_type == "DWORD":
        return _int32(ctype, signed=False)
    if c_type == "HRESULT":
        return _int32(ctype, signed=True)  # not ctypes.HRESULT: it would raise before freeing
    raise AssertionError(f"no rule for {c_type}")


@pytest.mark.parametrize(
    ("signatures", "reference"),
    [(COMPUTECORE_SIGNATURES, REFERENCE), (KERNEL32_SIGNATURES, KERNEL32_REFERENCE)],
    ids=["computecore", "kernel32"],
)
def test_every_signature_matches_the_reference(
    signatures: dict[str, tuple[Any, tuple[Any, ...]]],
    reference: dict[str, tuple[list[str], str]],
) -> None:
    assert set(signatures) == set(reference)
    for name, (parameters, returns) in reference.items():
        restype, argtypes = signatures[name]
        assert len(argtypes) == len(parameters), name
        for index, (c_type, ctype) in enumerate(zip(parameters, argtypes, strict=True)):
            assert matches(c_type, ctype), f"{name} parameter {index}: {c_type} vs {ctype}"
        assert matches(returns, restype), f"{name} returns {returns}, bound as {restype}"


def test_compute_core_binds_those_signatures_on_the_dll(tmp_path: Path) -> None:
    fake = FakeComputeCore(FakeNode(tmp_path))
    ComputeCore(fake.dll, fake.kernel32)
    for name, (restype, argtypes) in COMPUTECORE_SIGNATURES.items():
        function = getattr(fake.dll, name)
        assert function.restype is restype, name
        assert function.argtypes == list(argtypes), name
    assert fake.kernel32.LocalFree.argtypes == [ctypes.c_void_p]


@pytest.fixture
def hcs(tmp_path: Path) -> tuple[ComputeCore, FakeComputeCore, FakeNode]:
    node = FakeNode(tmp_path)
    node.systems["abc@vm"] = {
        "Id": "abc@vm",
        "SystemType": "VirtualMachine",
        "Owner": "containerd-shim-runhcs-v1.exe",
        "State": "Running",
        "_size": VmSize(processors=2, memory_mb=2048),
    }
    fake = node.computecore
    return ComputeCore(fake.dll, fake.kernel32), fake, node


def test_enumerate_sends_the_query_and_frees_the_result(
    hcs: tuple[ComputeCore, FakeComputeCore, FakeNode],
) -> None:
    core, fake, _ = hcs
    systems = core.enumerate_compute_systems({"Ids": ["abc@vm", "abc"]}, timeout=5)
    assert systems == [
        {
            "Id": "abc@vm",
            "SystemType": "VirtualMachine",
            "Owner": "containerd-shim-runhcs-v1.exe",
            "State": "Running",
        }
    ]
    names = [call[0] for call in fake.calls]
    assert names == [
        "HcsCreateOperation",
        "HcsEnumerateComputeSystems",
        "HcsWaitForOperationResult",
        "HcsCloseOperation",
    ]
    assert fake.calls[0][1:] == (None, None)  # no context, no callback: wait synchronously
    assert fake.calls[1][1] == {"Ids": ["abc@vm", "abc"]}
    assert fake.calls[2][2] == 5000  # the timeout in milliseconds
    assert len(fake.freed) == 1
    fake.assert_clean()


def test_properties_open_with_generic_all_and_close_at_once(
    hcs: tuple[ComputeCore, FakeComputeCore, FakeNode],
) -> None:
    core, fake, _ = hcs
    properties = core.compute_system_properties("abc@vm", ["Memory"], timeout=5)
    assert properties["Memory"]["VirtualMachineMemory"]["AssignedMemory"] == 2048 * 256
    assert ("HcsOpenComputeSystem", "abc@vm", GENERIC_ALL) in fake.calls
    assert fake.calls[-1][0] == "HcsCloseComputeSystem"
    fake.assert_clean()


def test_a_missing_system_is_an_error_with_its_name(
    hcs: tuple[ComputeCore, FakeComputeCore, FakeNode],
) -> None:
    core, fake, _ = hcs
    with pytest.raises(HcsError, match="HCS_E_SYSTEM_NOT_FOUND") as raised:
        core.compute_system_properties("nope@vm", ["Memory"], timeout=5)
    assert raised.value.hresult is not None
    fake.assert_clean()


def test_a_timed_out_operation_is_cancelled_and_its_error_document_freed(
    hcs: tuple[ComputeCore, FakeComputeCore, FakeNode],
) -> None:
    core, fake, _ = hcs
    fake.enumerate_result = ctypes.c_int32(HCS_E_OPERATION_TIMEOUT).value
    with pytest.raises(HcsError, match="HCS_E_OPERATION_TIMEOUT: The operation timed out"):
        core.enumerate_compute_systems({}, timeout=1)
    assert "HcsCancelOperation" in [call[0] for call in fake.calls]
    assert len(fake.freed) == 1  # the ResultError document, freed although the call failed
    fake.assert_clean()


def test_service_properties_report_the_hosts_processors(
    hcs: tuple[ComputeCore, FakeComputeCore, FakeNode],
) -> None:
    core, fake, node = hcs
    topology = core.service_properties(["ProcessorTopology"])
    assert topology["Properties"][0]["LogicalProcessorCount"] == node.logical_processors
    assert fake.calls == [("HcsGetServiceProperties", {"PropertyTypes": ["ProcessorTopology"]})]
    fake.assert_clean()


def test_vmcompute_style_codes_get_the_same_names() -> None:
    assert hresult_name(0x8037010E) == "HCS_E_SYSTEM_NOT_FOUND"
    assert hresult_name(0xC037010E) == "HCS_E_SYSTEM_NOT_FOUND"
    assert hresult_name(ctypes.c_int32(0x80370118).value) == "HCS_E_OPERATION_TIMEOUT"
    assert hresult_name(0x80004005) == "0x80004005"


@pytest.mark.skipif(sys.platform == "win32", reason="on Windows the real DLL loads")
def test_the_real_dll_is_never_loaded_off_windows() -> None:
    with pytest.raises(HcsError, match="only on Windows"):
        load_computecore()
