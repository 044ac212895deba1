"""The Host Compute Service through computecore.dll, with ctypes.

Signatures follow Microsoft's HCS reference (MicrosoftDocs/Virtualization-Documentation
``virtualization/api/hcs/Reference/*.md`` at 77e0742a; hcsshim ``internal/computecore``); a
unit test checks every ``argtypes``/``restype`` against it. Rules kept here:

- one operation per call, always closed; on ``HCS_E_OPERATION_TIMEOUT`` the operation is
  cancelled first (hcsshim ``internal/hcs/v2/operation.go``);
- every result document the DLL hands back is freed with ``LocalFree`` (as the docs say;
  hcsshim uses CoTaskMemFree), also when the call failed;
- result documents are taken as raw pointers (``POINTER(c_void_p)``), never ``c_wchar_p``,
  which would copy the string and lose the pointer that must be freed;
- HRESULTs are plain 32-bit integers (failure when negative), not ctypes' ``HRESULT``
  restype, which would raise before the error document could be read and freed;
- a compute system is opened only to read properties, and closed at once: shim-created
  utility VMs terminate when their last handle closes, so the agent never keeps one.

Nothing in this module calls into Windows unless ``load_computecore()`` is called, which
refuses on other platforms; the tests drive ``ComputeCore`` with a fake DLL made of ctypes
callbacks that have these same signatures.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping, Sequence
from typing import Any

from wcow_agent.host.interfaces import HcsError
from wcow_agent.host.process import on_windows

HANDLE = ctypes.c_void_p  # HCS_OPERATION, HCS_SYSTEM: opaque, pointer-sized
HRESULT = ctypes.c_int32  # == c_long on Windows
DWORD = ctypes.c_uint32  # == c_ulong on Windows
PCWSTR = ctypes.c_wchar_p
PWSTR_OUT = ctypes.POINTER(ctypes.c_void_p)  # PWSTR*: keep the pointer to free it
HANDLE_OUT = ctypes.POINTER(ctypes.c_void_p)  # HCS_SYSTEM*

# name -> (restype, argtypes), in the order of the C prototypes.
COMPUTECORE_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "HcsCreateOperation": (HANDLE, (ctypes.c_void_p, ctypes.c_void_p)),
    "HcsCloseOperation": (None, (HANDLE,)),
    "HcsCancelOperation": (HRESULT, (HANDLE,)),
    "HcsWaitForOperationResult": (HRESULT, (HANDLE, DWORD, PWSTR_OUT)),
    "HcsEnumerateComputeSystems": (HRESULT, (PCWSTR, HANDLE)),
    "HcsOpenComputeSystem": (HRESULT, (PCWSTR, DWORD, HANDLE_OUT)),
    "HcsGetComputeSystemProperties": (HRESULT, (HANDLE, HANDLE, PCWSTR)),
    "HcsCloseComputeSystem": (None, (HANDLE,)),
    "HcsGetServiceProperties": (HRESULT, (PCWSTR, PWSTR_OUT)),
}
KERNEL32_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "LocalFree": (ctypes.c_void_p, (ctypes.c_void_p,)),
}

GENERIC_ALL = 0x10000000  # the only access HcsOpenComputeSystem accepts
HCS_E_OPERATION_TIMEOUT = 0x80370118
HCS_E_SYSTEM_NOT_FOUND = 0x8037010E
HCS_E_ACCESS_DENIED = 0x8037011B

_KNOWN = {
    0x80370101: "HCS_E_IMAGE_MISMATCH",
    0x80370105: "HCS_E_INVALID_STATE",
    0x8037010D: "HCS_E_INVALID_JSON",
    HCS_E_SYSTEM_NOT_FOUND: "HCS_E_SYSTEM_NOT_FOUND",
    0x80370110: "HCS_E_SYSTEM_ALREADY_STOPPED",
    0x80370115: "HCS_E_OPERATION_NOT_STARTED",
    0x80370117: "HCS_E_OPERATION_PENDING",
    HCS_E_OPERATION_TIMEOUT: "HCS_E_OPERATION_TIMEOUT",
    HCS_E_ACCESS_DENIED: "HCS_E_ACCESS_DENIED (run as SYSTEM or in Hyper-V Administrators)",
}


def hresult_name(hresult: int) -> str:
    code = hresult & 0xFFFFFFFF
    # vmcompute reports 0xC037xxxx for the same errors: compare facility and low word.
    if code >> 16 in (0x8037, 0xC037):
        code = 0x80370000 | (code & 0xFFFF)
    return _KNOWN.get(code, f"0x{hresult & 0xFFFFFFFF:08X}")


def _bind(library: Any, signatures: Mapping[str, tuple[Any, tuple[Any, ...]]]) -> dict[str, Any]:
    functions = {}
    for name, (restype, argtypes) in signatures.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = list(argtypes)
        functions[name] = function
    return functions


class ComputeCore:
    """``Hcs`` over a loaded computecore.dll (or a fake with the same exports)."""

    def __init__(self, computecore: Any, kernel32: Any) -> None:
        self._hcs = _bind(computecore, COMPUTECORE_SIGNATURES)
        self._kernel32 = _bind(kernel32, KERNEL32_SIGNATURES)

    def _take_document(self, pointer: ctypes.c_void_p) -> str:
        """The UTF-16 document behind ``pointer``, freed afterwards (LocalFree)."""
        if not pointer.value:
            return ""
        try:
            return ctypes.wstring_at(pointer.value)
        finally:
            self._kernel32["LocalFree"](pointer.value)
            pointer.value = None

    def _operation(self, call: str, start: Any, timeout: float) -> str:
        """Create an operation, start the call with it, wait for its result document."""
        operation = self._hcs["HcsCreateOperation"](None, None)
        if not operation:
            raise HcsError(f"HcsCreateOperation failed before {call}")
        try:
            hresult = start(operation)
            if hresult < 0:
                raise HcsError(f"{call} failed: {hresult_name(hresult)}", hresult)
            document = ctypes.c_void_p()
            milliseconds = max(1, int(timeout * 1000))
            hresult = self._hcs["HcsWaitForOperationResult"](
                operation, milliseconds, ctypes.byref(document)
            )
            text = self._take_document(document)
            if hresult < 0:
                if hresult & 0xFFFFFFFF == HCS_E_OPERATION_TIMEOUT:
                    self._hcs["HcsCancelOperation"](operation)
                raise HcsError(
                    f"{call} failed: {hresult_name(hresult)}{_error_detail(text)}", hresult
                )
            return text
        finally:
            self._hcs["HcsCloseOperation"](operation)

    def enumerate_compute_systems(
        self, query: Mapping[str, Any], timeout: float
    ) -> list[dict[str, Any]]:
        query_text = json.dumps(dict(query), sort_keys=True)
        text = self._operation(
            "HcsEnumerateComputeSystems",
            lambda op: self._hcs["HcsEnumerateComputeSystems"](query_text, op),
            timeout,
        )
        systems = json.loads(text) if text.strip() else []
        if not isinstance(systems, list):
            raise HcsError(f"HcsEnumerateComputeSystems returned {type(systems).__name__}")
        return [s for s in systems if isinstance(s, dict)]

    def compute_system_properties(
        self, system_id: str, property_types: Sequence[str], timeout: float
    ) -> dict[str, Any]:
        system = ctypes.c_void_p()
        hresult = self._hcs["HcsOpenComputeSystem"](system_id, GENERIC_ALL, ctypes.byref(system))
        if hresult < 0:
            raise HcsError(
                f"HcsOpenComputeSystem({system_id}) failed: {hresult_name(hresult)}", hresult
            )
        query_text = json.dumps({"PropertyTypes": list(property_types)})
        try:
            text = self._operation(
                "HcsGetComputeSystemProperties",
                lambda op: self._hcs["HcsGetComputeSystemProperties"](system.value, op, query_text),
                timeout,
            )
        finally:
            self._hcs["HcsCloseComputeSystem"](system.value)
        properties = json.loads(text) if text.strip() else {}
        if not isinstance(properties, dict):
            raise HcsError(f"HcsGetComputeSystemProperties returned {type(properties).__name__}")
        return properties

    def service_properties(self, property_types: Sequence[str]) -> dict[str, Any]:
        document = ctypes.c_void_p()
        query_text = json.dumps({"PropertyTypes": list(property_types)})
        hresult = self._hcs["HcsGetServiceProperties"](query_text, ctypes.byref(document))
        text = self._take_document(document)
        if hresult < 0:
            raise HcsError(
                f"HcsGetServiceProperties failed: {hresult_name(hresult)}{_error_detail(text)}",
                hresult,
            )
        properties = json.loads(text) if text.strip() else {}
        return properties if isinstance(properties, dict) else {}


def _error_detail(text: str) -> str:
    """The ``ErrorMessage`` of an HCS ResultError document, if there is one."""
    try:
        document = json.loads(text) if text else None
    except json.JSONDecodeError:
        return f": {text[:200]}"
    if isinstance(document, dict) and document.get("ErrorMessage"):
        return f": {document['ErrorMessage']}"
    return ""


def load_computecore() -> ComputeCore:
    """computecore.dll and kernel32 of this Windows host (Windows 10 1809 / WS2019 and up)."""
    if not on_windows():
        raise HcsError("computecore.dll exists only on Windows")
    win_dll = getattr(ctypes, "WinDLL")  # noqa: B009 - absent from ctypes off Windows
    return ComputeCore(win_dll("computecore.dll"), win_dll("kernel32.dll"))
