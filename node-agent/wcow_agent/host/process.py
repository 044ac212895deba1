"""Running host commands (containerd.exe, crictl.exe, powershell.exe) with hard timeouts."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wcow_agent.host.interfaces import CancelledError, CommandTimeoutError, HostError

# Without this flag every console program started from a service flashes a window or
# inherits the agent's console; harmless elsewhere.
_CREATE_NO_WINDOW = 0x08000000 if sys.platform == "win32" else 0
_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def __call__(
        self, args: Sequence[str], *, timeout: float, input_text: str | None = None
    ) -> Completed: ...


class SubprocessRunner:
    """Runs a command, kills it when it outlives ``timeout`` or when ``cancel`` is set.

    ``cancel`` is the agent's stop event: a canary step in flight is abandoned at once when
    the pod is being stopped, so its cleanup still fits in the grace period.
    """

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self.cancel = cancel

    def __call__(
        self, args: Sequence[str], *, timeout: float, input_text: str | None = None
    ) -> Completed:
        try:
            process = subprocess.Popen(  # noqa: S603 - fixed tool paths, argument lists
                list(args),
                stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                creationflags=_CREATE_NO_WINDOW,
            )
        except OSError as error:
            raise HostError(f"cannot run {args[0]}: {error}") from None
        deadline = time.monotonic() + timeout
        pending_input = input_text
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill(process)
                raise CommandTimeoutError(
                    f"{_show(args)} did not finish in {timeout:.0f} s (killed)"
                )
            if self.cancel is not None and self.cancel.is_set():
                _kill(process)
                raise CancelledError(f"{_show(args)} abandoned: the agent is stopping")
            try:
                stdout, stderr = process.communicate(
                    pending_input, timeout=min(remaining, _POLL_SECONDS)
                )
            except subprocess.TimeoutExpired:
                pending_input = None  # already written; communicate() must not resend it
                continue
            return Completed(process.returncode, stdout or "", stderr or "")


def on_windows() -> bool:
    """A plain function, so that type checkers on Linux still check the Windows paths."""
    return sys.platform == "win32"


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=5)


def _show(args: Sequence[str]) -> str:
    return " ".join(args[:3]) + (" ..." if len(args) > 3 else "")
