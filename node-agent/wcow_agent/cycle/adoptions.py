"""Adopted hand-written tables said out loud.

An adopted table (``--adopt-handlers``) is kept in the state when the agent takes it over and
written back when the agent lets go of the handler (``merge``); ``note_adoptions`` says both
on the Node.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from wcow_agent.config.merge import MergeResult
from wcow_agent.config.state import Paths
from wcow_agent.cycle.decisions import CycleReport

log = logging.getLogger("wcow_agent")


def note_adoptions(report: CycleReport, result: MergeResult, paths: Paths) -> None:
    """Say what an adoption replaced or gave back: an event, the log, and the handler's
    message in the status annotation (kept while its state holds)."""
    if report.result != "applied":
        return
    outcomes = report.handlers if report.handlers is not None else {}
    for handler, table in sorted(result.adopted.items()):
        note = (
            f"adopted the hand-written table {handler!r} of {paths.config} "
            f"(--adopt-handlers); it replaced {_compact(table)}, kept in "
            f"{paths.state.name} and written back when the agent lets go of it"
        )
        log.warning("%s", note)
        report.event("HandlerAdopted", note, warning=True)
        outcome = outcomes.get(handler)
        if outcome is not None:
            message = f"{outcome.message}; {note}" if outcome.message else note
            outcomes[handler] = replace(outcome, message=message, carried=False)
    for handler in result.restored:
        note = f"wrote back the hand-written table {handler!r} the agent had adopted"
        log.info("%s", note)
        report.event("AdoptedTableRestored", note)


def _compact(table: Mapping[str, Any]) -> str:
    return json.dumps(table, sort_keys=True, separators=(",", ":"), default=str)
