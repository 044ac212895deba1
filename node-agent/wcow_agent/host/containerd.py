"""containerd's own command line: version, ``config default``, ``config dump``.

These run the same on Linux, so the tests drive Debian's containerd through this class to
check that merged files load. Restarting the service is Windows-only (``windows.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from wcow_agent.host.interfaces import ContainerdError, HostError
from wcow_agent.host.process import Runner

_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)(\S*)")
_COMMAND_TIMEOUT = 60.0


def parse_containerd_version(output: str) -> str:
    """``containerd github.com/containerd/containerd/v2 v2.0.0 207ad71`` -> ``2.0.0``;
    Debian's ``... 1.6.20~ds1 1.6.20~ds1-1`` -> ``1.6.20``."""
    words = output.split()
    for word in words[2:] + words[:2]:
        match = _VERSION.fullmatch(word) or _VERSION.match(word)
        if match:
            return ".".join(match.group(1, 2, 3))
    raise ContainerdError(f"cannot read a version from `containerd --version`: {output.strip()!r}")


class ServiceControl(Protocol):
    def restart(self, timeout: float) -> None: ...


class ContainerdCli:
    """``containerd.exe`` (or ``containerd`` on Linux) and the service that runs it."""

    def __init__(self, binary: str, runner: Runner, service: ServiceControl | None = None) -> None:
        self.binary = binary
        self.runner = runner
        self.service = service

    def _run(self, *args: str) -> str:
        try:
            result = self.runner([self.binary, *args], timeout=_COMMAND_TIMEOUT)
        except HostError as error:
            raise ContainerdError(str(error)) from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise ContainerdError(
                f"`containerd {' '.join(args)}` failed (exit {result.returncode}): "
                + (detail[-1] if detail else "no output")
            )
        return result.stdout

    def version(self) -> str:
        return parse_containerd_version(self._run("--version"))

    def config_default(self) -> str:
        return self._run("config", "default")

    def config_dump(self, config: Path) -> str:
        return self._run("--config", str(config), "config", "dump")

    def restart(self, timeout: float) -> None:
        if self.service is None:
            raise ContainerdError("no service control configured for containerd")
        self.service.restart(timeout)
