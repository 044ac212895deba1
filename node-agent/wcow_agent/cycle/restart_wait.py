"""``--restart-mode none``: the agent writes, and containerd's owner restarts it.

Until containerd runs what the agent wrote, the handlers it changed are ``Pending`` /
``RestartRequired`` (no canary is spent on a table containerd has not loaded), an event
says so, and the cycle is retried. The change counts as applied once containerd is seen
running it:

- containerd 2.x reports its runtime handlers over CRI (``runtimeHandlers``): every handler
  the agent placed is there (and none it removed);
- containerd 1.x does not: the canaries run, and a canary refused with ``RuntimeNotLoaded``
  keeps the handler ``RestartRequired``; when none is, the change counts as loaded (a
  changed table whose old version still runs is told only by what its canary checks).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.placed import Placed
from wcow_agent.config.state import StateJournal
from wcow_agent.cycle.decisions import CycleReport, HandlerOutcome
from wcow_agent.host.interfaces import Host, HostError
from wcow_contract.wire.plan import PlanEntry

REASON = "RestartRequired"


def awaiting(journal: StateJournal, disk_hash: str | None) -> bool:
    """The agent wrote what is on disk and containerd has not been seen running it."""
    state = journal.state
    return disk_hash is not None and disk_hash == state.written and state.loaded != disk_hash


def loaded_by_handlers(
    host: Host, placed: Collection[str], removed: Collection[str]
) -> bool | None:
    """Whether containerd runs the placed handlers, from CRI's handler list; None: it does
    not report one (containerd 1.x), or CRI does not answer."""
    try:
        status = host.cri.status(10.0)
    except HostError:
        return None
    if status.handlers is None:
        return None
    running = set(status.handlers)
    return set(placed) <= running and not (set(removed) & running)


def hold(
    report: CycleReport, eligible: Mapping[str, PlanEntry], handlers: Collection[str], why: str
) -> None:
    """The handlers wait for the restart: Pending, no canary."""
    outcomes = report.handlers if report.handlers is not None else {}
    for handler in sorted(handlers):
        if handler in eligible and handler not in outcomes:
            outcomes[handler] = HandlerOutcome("Pending", REASON, why, eligible[handler].generation)
    report.handlers = outcomes


def message(service: str, files: Collection[str]) -> str:
    where = ", ".join(files) or "containerd's configuration"
    return (
        f"written to {where}; containerd has not loaded it yet: restart containerd (the "
        f"service {service!r}, or the node's own way) to load it (--restart-mode none)"
    )


def wait_for_restart(
    host: Host,
    layout: NodeLayout,
    cycle: tuple[CycleReport, StateJournal],
    placed: Placed,
    eligible: Mapping[str, PlanEntry],
) -> bool:
    """Whether containerd still has to load what the agent wrote (``--restart-mode none``);
    the handlers then wait: without a canary where CRI's handler list says so, or when
    written this very cycle."""
    report, journal = cycle
    if layout.restart_mode != "none" or not awaiting(journal, placed.config_hash):
        return False
    ours = [h for h, mark in placed.result.owned.items() if mark != "seeded"]
    loaded = loaded_by_handlers(host, ours, placed.result.removed)
    if loaded:
        journal.came_up(placed.config_hash)
        return False
    report.restart_required = True
    report.requeue = True
    files = [str(edit.path) for edit in placed.edits()] or [str(layout.config)]
    why = message(layout.service_name, files)
    report.event(REASON, why, warning=True)
    if loaded is False or report.result == "restart_required":
        hold(report, eligible, ours, why)  # not loaded: no canary spent
    return True


def restart_seen(report: CycleReport, journal: StateJournal, placed: Placed) -> None:
    """containerd 1.x (no handler list over CRI): no canary found a handler missing, so
    containerd runs what the agent wrote."""
    outcomes = report.handlers or {}
    if all(o.reason != REASON for o in outcomes.values()):
        journal.came_up(placed.config_hash)
        report.restart_required = False
