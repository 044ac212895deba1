"""What goes wrong on a simulated node: ``--fault KIND[=VALUE][@NODES]`` parsed, the faults
of one node (changeable while it runs), and ``SimulatedCrash``, the agent process dying."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

FAULT_KINDS = ("canary-fail", "restart-fail", "slow-canary", "kill-mid-apply", "pull-fail")


class SimulatedCrash(BaseException):
    """The agent process dies here. Raised from inside a host call and not an Exception,
    so the agent's own error handling does not catch it: the thread running it ends."""


@dataclass(frozen=True)
class Fault:
    """One ``--fault KIND[=VALUE][@NODES]``: NODES is a node name or a glob (all nodes when
    absent). canary-fail[=HANDLER], restart-fail[=HANDLER|IMAGE], slow-canary=SECONDS,
    kill-mid-apply[=TIMES], pull-fail[=IMAGE]."""

    kind: str
    value: str | None = None
    nodes: str = "*"

    def applies_to(self, node: str) -> bool:
        return fnmatch.fnmatchcase(node, self.nodes)


def parse_fault(text: str) -> Fault:
    body, _, nodes = text.partition("@")
    kind, has_value, value = body.partition("=")
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"--fault {text!r}: unknown kind {kind!r} (one of {', '.join(FAULT_KINDS)})"
        )
    if has_value and not value:
        raise ValueError(f"--fault {text!r}: empty value after '='")
    if kind == "slow-canary":
        if not has_value:
            raise ValueError(f"--fault {text!r}: slow-canary needs =SECONDS")
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"--fault {text!r}: {value!r} is not a number of seconds") from None
        if seconds < 0:
            raise ValueError(f"--fault {text!r}: seconds must not be negative")
    if kind == "kill-mid-apply" and has_value and not value.isdigit():
        raise ValueError(f"--fault {text!r}: {value!r} is not a number of times")
    if "@" in text and not nodes:
        raise ValueError(f"--fault {text!r}: empty node name after '@'")
    return Fault(kind, value if has_value else None, nodes or "*")


@dataclass
class Faults:
    """What goes wrong on one node (changeable while it runs: tests flip them). The first
    five come from ``--fault``; the others only tests set."""

    canary_fail: set[str] = field(default_factory=set)  # handlers; "*" for all
    restart_fail: set[str] = field(default_factory=set)  # handlers; "*" for any agent file
    slow_canary_seconds: float = 0.0
    kills_left: int = 0  # times the agent dies between writing config.toml and restarting
    pull_fail: set[str] = field(default_factory=set)  # image references; "*" for all
    crash_at_call: int | None = None
    """The agent dies at its Nth host call (``SimulatedNode.call``), and every call after it
    dies too: the crash tests kill it at each step of an apply in turn."""
    refuse: Callable[[str | None], str | None] | None = None
    """Why containerd will not come up with a config.toml text (None: it will)."""
    refuse_mode: str = "start"
    """How a refused restart fails: "start" (the service does not start) or "cri" (it
    starts, but CRI never answers)."""
    runp_hangs: bool = False
    """A sandbox start does not answer within its timeout; the sandbox comes up later all
    the same (as containerd goes on after crictl is killed)."""
    ignore_isolation: bool = False
    """The shim runs a Hyper-V handler's sandbox as a process container."""
    vm_processors: int | None = None
    """The vCPUs a utility VM really gets, whatever was asked (None: as asked)."""
    vm_memory_mb: int | None = None
    """The memory a utility VM really gets, whatever was asked (None: as asked)."""

    @classmethod
    def for_node(cls, node: str, faults: Sequence[Fault]) -> Faults:
        result = cls()
        for fault in faults:
            if not fault.applies_to(node):
                continue
            if fault.kind == "canary-fail":
                result.canary_fail.add(fault.value or "*")
            elif fault.kind == "restart-fail":
                result.restart_fail.add(fault.value or "*")
            elif fault.kind == "slow-canary":
                result.slow_canary_seconds += float(fault.value or 0)
            elif fault.kind == "pull-fail":
                result.pull_fail.add(fault.value or "*")
            else:
                result.kills_left += int(fault.value or 1)
        return result
