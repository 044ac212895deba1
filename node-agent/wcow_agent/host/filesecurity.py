"""Who may read and write a file: kept when the agent replaces config.toml.

An atomic replace writes a new file and renames it over the old one, so the result has the
new file's access control unless it is copied over first: the mode and owner on Linux (a
0644 file would become mkstemp's 0600), the owner, group and DACL on Windows (a custom ACL
would fall back to what the folder's inheritance gives).

``PosixFileSecurity`` runs in the tests. ``WindowsFileSecurity`` calls advapi32 through
ctypes (``GetNamedSecurityInfoW`` / ``SetNamedSecurityInfoW``, signatures from Microsoft's
Win32 reference); it is type-checked for win32 and exercised by the Windows workflow
(``.github/workflows/windows-agent.yml``), never run in this project's Linux tests.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from pathlib import Path
from typing import Any

from wcow_agent.host.interfaces import FileSecurity
from wcow_agent.host.process import on_windows

SE_FILE_OBJECT = 1
OWNER_SECURITY_INFORMATION = 0x00000001
GROUP_SECURITY_INFORMATION = 0x00000002
DACL_SECURITY_INFORMATION = 0x00000004
PROTECTED_DACL_SECURITY_INFORMATION = 0x80000000
UNPROTECTED_DACL_SECURITY_INFORMATION = 0x20000000
SE_DACL_PROTECTED = 0x1000

_PVOID_OUT = ctypes.POINTER(ctypes.c_void_p)
# name -> (restype, argtypes), in the order of the C prototypes (aclapi.h, securitybaseapi.h).
ADVAPI32_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "GetNamedSecurityInfoW": (
        ctypes.c_uint32,  # DWORD error code
        (
            ctypes.c_wchar_p,  # LPCWSTR pObjectName
            ctypes.c_int,  # SE_OBJECT_TYPE
            ctypes.c_uint32,  # SECURITY_INFORMATION
            _PVOID_OUT,  # PSID* ppsidOwner
            _PVOID_OUT,  # PSID* ppsidGroup
            _PVOID_OUT,  # PACL* ppDacl
            _PVOID_OUT,  # PACL* ppSacl
            _PVOID_OUT,  # PSECURITY_DESCRIPTOR* (LocalFree)
        ),
    ),
    "SetNamedSecurityInfoW": (
        ctypes.c_uint32,
        (
            ctypes.c_wchar_p,  # LPWSTR pObjectName
            ctypes.c_int,
            ctypes.c_uint32,
            ctypes.c_void_p,  # PSID psidOwner
            ctypes.c_void_p,  # PSID psidGroup
            ctypes.c_void_p,  # PACL pDacl
            ctypes.c_void_p,  # PACL pSacl
        ),
    ),
    "GetSecurityDescriptorControl": (
        ctypes.c_int,  # BOOL
        (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint16), ctypes.POINTER(ctypes.c_uint32)),
    ),
}


class PosixFileSecurity:
    """Mode bits and owner (uid, gid)."""

    def copy(self, source: Path, target: Path) -> None:
        info = os.stat(source)
        os.chmod(target, stat.S_IMODE(info.st_mode))
        now = os.stat(target)
        if sys.platform != "win32" and (now.st_uid, now.st_gid) != (info.st_uid, info.st_gid):
            try:
                os.chown(target, info.st_uid, info.st_gid)
            except PermissionError as error:
                raise PermissionError(
                    error.errno,
                    f"cannot give the new file the owner of {source} "
                    f"(uid {info.st_uid}, gid {info.st_gid}); run as that user or root",
                    str(target),
                ) from None


class WindowsFileSecurity:
    """Owner, group and DACL (with its protection from inheritance) of the old file."""

    def __init__(self, advapi32: Any = None, kernel32: Any = None) -> None:
        if advapi32 is None or kernel32 is None:  # pragma: no cover - Windows only
            advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
            for name, (restype, argtypes) in ADVAPI32_SIGNATURES.items():
                function = getattr(advapi32, name)
                function.restype = restype
                function.argtypes = argtypes
            kernel32.LocalFree.restype = ctypes.c_void_p
            kernel32.LocalFree.argtypes = (ctypes.c_void_p,)
        self.advapi32 = advapi32
        self.kernel32 = kernel32

    def copy(self, source: Path, target: Path) -> None:  # pragma: no cover - Windows only
        owner, group, dacl, descriptor = (ctypes.c_void_p() for _ in range(4))
        wanted = OWNER_SECURITY_INFORMATION | GROUP_SECURITY_INFORMATION
        error = self.advapi32.GetNamedSecurityInfoW(
            str(source),
            SE_FILE_OBJECT,
            wanted | DACL_SECURITY_INFORMATION,
            ctypes.byref(owner),
            ctypes.byref(group),
            ctypes.byref(dacl),
            None,
            ctypes.byref(descriptor),
        )
        if error:
            raise OSError(0, f"cannot read the security of {source}: error {error}", str(source))
        try:
            control, revision = ctypes.c_uint16(), ctypes.c_uint32()
            if not self.advapi32.GetSecurityDescriptorControl(
                descriptor, ctypes.byref(control), ctypes.byref(revision)
            ):
                raise OSError(0, f"cannot read the security of {source}", str(source))
            protection = (
                PROTECTED_DACL_SECURITY_INFORMATION
                if control.value & SE_DACL_PROTECTED
                else UNPROTECTED_DACL_SECURITY_INFORMATION
            )
            error = self.advapi32.SetNamedSecurityInfoW(
                str(target),
                SE_FILE_OBJECT,
                wanted | DACL_SECURITY_INFORMATION | protection,
                owner,
                group,
                dacl,
                None,
            )
            if error:
                raise OSError(
                    0,
                    f"cannot give the new file the owner and ACL of {source}: error {error} "
                    "(setting another owner needs SeRestorePrivilege; run as SYSTEM)",
                    str(target),
                )
        finally:
            self.kernel32.LocalFree(descriptor)


def platform_file_security() -> FileSecurity:
    return WindowsFileSecurity() if on_windows() else PosixFileSecurity()
