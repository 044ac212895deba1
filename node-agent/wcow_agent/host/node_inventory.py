"""The real ``NodeInventory``: services' command lines from the registry, paths on disk.

The Service Control Manager keeps each service under
``HKLM\\SYSTEM\\CurrentControlSet\\Services\\<name>``: ``ImagePath`` is the command line it
starts (``Win32_Service.PathName``; a ``REG_EXPAND_SZ``, so ``%ProgramFiles%`` may appear in
it), and nssm, which AKS wraps containerd in (AgentBaker
``staging/cse/windows/containerdfunc.ps1``), keeps the program it runs under ``Parameters``.
Read with ``winreg``, loaded lazily: this module imports anywhere, and works only on Windows.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

SERVICES_KEY = r"SYSTEM\CurrentControlSet\Services"


class RegistryNodeInventory:
    def service_command_line(self, name: str) -> str | None:
        return self._value(rf"{SERVICES_KEY}\{name}", "ImagePath")

    def service_parameter(self, name: str, value: str) -> str | None:
        return self._value(rf"{SERVICES_KEY}\{name}\Parameters", value)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    @staticmethod
    def _value(key: str, name: str) -> str | None:
        winreg: Any = importlib.import_module("winreg")
        try:
            with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, key) as handle:
                value, kind = winreg.QueryValueEx(handle, name)
        except FileNotFoundError:
            return None
        if kind == winreg.REG_EXPAND_SZ:
            value = winreg.ExpandEnvironmentStrings(value)
        return str(value) if value is not None else None
