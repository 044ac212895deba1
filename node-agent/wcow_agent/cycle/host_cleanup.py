"""Letting go of the host: ``wcow-agent uninstall``, and the running agent's uninstall when
the plan carries ``runtime.wcow.dev/uninstall``.

``Uninstaller`` takes the agent's handlers out of wherever they are (its drop-in deleted with
the import it added, its tables cut from the template or config.toml, adopted tables written
back), puts the pause image key back, restarts containerd once (or leaves that to its owner:
``--restart-mode none``) and deletes the agent's files; ``loop/node_cleanup.py`` then
removes the agent's labels and annotations from its Node.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from wcow_agent.config.file_set import FileEdit, text_hash
from wcow_agent.config.file_writes import drop_leftovers, restore_edits, write_edits
from wcow_agent.config.files import read_config, sweep_temp_files
from wcow_agent.config.layout import RestartMode
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.placed import Placed
from wcow_agent.config.sandbox_image import with_pause_image
from wcow_agent.config.state import AgentState, Paths, load_state
from wcow_agent.cycle.canary import Canary
from wcow_agent.cycle.decisions import CycleReport, restart_reason
from wcow_agent.cycle.handler_placement import NodeText, place_on_node
from wcow_agent.cycle.transaction import Restarter
from wcow_agent.host.interfaces import Host, HostError

log = logging.getLogger("wcow_agent")


class UninstallError(RuntimeError):
    pass


class Uninstaller:
    def __init__(
        self,
        host: Host,
        paths: Paths,
        canary: Canary,
        restart: Restarter,
        files: NodeFiles,
        *,
        restart_mode: RestartMode = "service",
    ) -> None:
        self.host = host
        self.paths = paths
        self.canary = canary
        self.restart = restart
        self.files = files
        self.restart_mode = restart_mode

    def run(self) -> list[str]:
        """Take every handler the agent placed out, restart containerd once, delete the
        agent's files. Returns what was done; raises UninstallError when containerd would
        not come up without them (the files are put back)."""
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
        original = read_config(self.paths.config)
        version = self._containerd_version_or_none()
        placed = place_on_node(self.files, NodeText(original, False), {}, state, version)
        if state.pause_held and placed.placement.way != "template":
            # the pause image key as it was before the agent set it
            text = with_pause_image(placed.result.text, placed.result.version, state.pause_previous)
            placed = replace(placed, result=replace(placed.result, text=text))
        edits = placed.edits()
        delete = state.created_config and self._is_containerd_default(placed.result.text)
        if delete:
            edits = [e for e in edits if e.path != self.paths.config]
            edits.insert(0, FileEdit(self.paths.config, original, None, "config"))
        if not edits:
            if restart_reason(state, text_hash(original), self.restart_mode):
                self.restart(CycleReport(), "recovery")
                return ["restarted containerd (an earlier restart was unfinished)"]
            return []
        write_edits(edits)
        done = self._said(placed, edits, state, delete)
        if self.restart_mode == "none":
            return [*done, "containerd not restarted (--restart-mode none): restart it to load"]
        report = CycleReport()
        came_up, why = self.restart(report, "uninstall")
        if not came_up:
            restore_edits(edits)
            self.restart(report, "rollback")
            were = "was put back as it was" if len(edits) == 1 else "were put back as they were"
            raise UninstallError(
                f"containerd did not come up without the agent's tables ({why}); "
                f"{', '.join(str(e.path) for e in edits)} {were}"
            )
        drop_leftovers(
            [e.path for e in edits], [e.path for e in edits if e.after is None], placed.folders
        )
        return [*done, "restarted containerd"]

    def _said(
        self, placed: Placed, edits: list[FileEdit], state: AgentState, delete: bool
    ) -> list[str]:
        done = []
        for edit in edits:
            if edit.path == self.paths.config and delete:
                done.append(f"deleted {edit.path} (the agent had created it)")
            elif edit.after is None:
                done.append(f"deleted {edit.path}")
            elif (
                edit.path == self.paths.config
                and edit.role == "config"
                and placed.placement.way == "merge"
            ):
                done.append(f"removed {', '.join(placed.result.removed) or 'the agent'}'s tables")
            else:
                done.append(f"took the agent's part out of {edit.path}")
        if state.pause_held and not delete:
            done.append(f"put the pause image back to {state.pause_previous or 'default'}")
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
