"""Letting go: adopted hand-written tables said out loud, ``wcow-agent uninstall``, and the
running agent's uninstall when the plan carries ``runtime.wcow.dev/uninstall``.

An adopted table (``--adopt-handlers``) is kept in the state when the agent takes it over and
written back when the agent lets go of the handler (``merge``); ``note_adoptions`` says both
on the Node. ``Uninstaller`` removes every table the agent owns (writing the adopted ones
back), puts the pause image key back, restarts containerd once and deletes the agent's files;
``clean_node`` then removes the agent's labels and annotations from its Node.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from wcow_agent.agent import CycleReport, merge_on_host, restart_reason
from wcow_agent.attempt import Restarter
from wcow_agent.canary import Canary
from wcow_agent.cluster import Cluster
from wcow_agent.files import read_config, sweep_temp_files, write_atomically
from wcow_agent.host.interfaces import Host, HostError
from wcow_agent.images import with_pause_image
from wcow_agent.merge import ConfigError, MergeResult
from wcow_agent.state import AgentState, Paths, load_state, text_hash
from wcow_contract.text import printable
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION, parse_agent_status
from wcow_contract.wire.uninstall import MAX_ERROR_CHARS, UNINSTALL_ERROR_ANNOTATION, node_cleanup

log = logging.getLogger("wcow_agent")


class UninstallError(RuntimeError):
    pass


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


class Uninstaller:
    def __init__(self, host: Host, paths: Paths, canary: Canary, restart: Restarter) -> None:
        self.host = host
        self.paths = paths
        self.canary = canary
        self.restart = restart

    def run(self) -> list[str]:
        """Remove every table the agent owns, restart containerd once, delete the agent's
        files. Returns what was done; raises UninstallError when containerd would not
        come up without the tables (the file with them is put back)."""
        done: list[str] = []
        paths = self.paths
        state, _ = load_state(paths.state)
        sweep_temp_files(paths.config)
        removed, _ = self.canary.sweep()
        if removed:
            done.append(f"removed canary sandboxes {', '.join(removed)}")
        if paths.config.exists():
            done += self._remove_tables(state)
        for leftover in (paths.state, paths.pristine, paths.backup):
            if leftover.exists():
                leftover.unlink()
                done.append(f"deleted {leftover.name}")
        return done

    def _remove_tables(self, state: AgentState) -> list[str]:
        paths, report, done = self.paths, CycleReport(), []
        original = read_config(paths.config)
        pristine = read_config(paths.pristine) if paths.pristine.exists() else None
        result = merge_on_host(original, {}, state, self._containerd_version_or_none(), pristine)
        if state.pause_held:  # the pause image key as it was before the agent set it
            text = with_pause_image(result.text, result.version, state.pause_previous)
            result = replace(result, text=text)
        delete = state.created_config and self._is_containerd_default(result.text)
        if result.changed(original) or delete:
            if delete:
                paths.config.unlink()
                done.append(f"deleted {paths.config} (the agent had created it)")
            else:
                write_atomically(paths.config, result.text)
                done.append(f"removed {', '.join(result.removed) or 'the agent'}'s tables")
                if state.pause_held:
                    done.append(f"put the pause image back to {state.pause_previous or 'default'}")
            came_up, why = self.restart(report, "uninstall")
            if not came_up:
                write_atomically(paths.config, original, backup=False)
                self.restart(report, "rollback")
                raise UninstallError(
                    f"containerd did not come up without the agent's tables ({why}); "
                    f"{paths.config} was put back as it was"
                )
            done.append("restarted containerd")
        elif restart_reason(state, text_hash(original)):
            self.restart(report, "recovery")
            done.append("restarted containerd (an earlier restart was unfinished)")
        return done

    def _containerd_version_or_none(self) -> str | None:
        try:
            return self.host.containerd.version()
        except HostError:
            return None

    def _is_containerd_default(self, text: str) -> bool:
        try:
            return text == self.host.containerd.config_default()
        except HostError:
            return False


def clean_node(cluster: Cluster, node_name: str) -> str:
    """Remove the agent's labels and annotations from its Node (``node_cleanup``: ready and
    capability labels, the guest-build labels its status reported, the status, an uninstall
    error, a pending canary request). Returns what was removed; raises ClusterError."""
    node = cluster.get_node(node_name)
    status = parse_agent_status(node.annotations.get(AGENT_STATUS_ANNOTATION))
    reported = (status.guest_builds or []) if status is not None else []
    labels, annotations = node_cleanup(node.labels, node.annotations, reported)
    cluster.patch_node(node_name, labels, annotations)
    return (
        f"removed {len(labels)} label(s) and {len(annotations)} annotation(s) of Node {node_name}"
    )


def let_go(run: Callable[[], list[str]], cluster: Cluster, node_name: str) -> str | None:
    """The running agent's uninstall: the host first (``run``: ``Uninstaller.run``), then the
    Node. None when the node is clean; else why not, also written to the Node
    (``runtime.wcow.dev/uninstall-error``, which ``wcow-operator uninstall`` prints) while the
    labels and status stay, since the tables do. Raises ClusterError."""
    try:
        for line in run():
            log.info("uninstall: %s", line)
    except (UninstallError, HostError, ConfigError, OSError) as error:
        why = printable(f"cannot uninstall: {error}", MAX_ERROR_CHARS)
        log.warning("%s", why)
        node = cluster.get_node(node_name)
        if node.annotations.get(UNINSTALL_ERROR_ANNOTATION) != why:
            cluster.patch_node(node_name, {}, {UNINSTALL_ERROR_ANNOTATION: why})
        return why
    log.info("uninstall: %s", clean_node(cluster, node_name))
    return None
