"""Letting go of the host: ``wcow-agent uninstall``, and the running agent's uninstall when
the plan carries ``runtime.wcow.dev/uninstall``.

``Uninstaller`` removes every table the agent owns (writing the adopted ones back), puts the
pause image key back, restarts containerd once and deletes the agent's files;
``loop/node_cleanup.py`` then removes the agent's labels and annotations from its Node.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from wcow_agent.config.file_set import text_hash
from wcow_agent.config.files import read_config, sweep_temp_files, write_atomically
from wcow_agent.config.sandbox_image import with_pause_image
from wcow_agent.config.state import AgentState, Paths, load_state
from wcow_agent.cycle.canary import Canary
from wcow_agent.cycle.decisions import CycleReport, merge_on_host, restart_reason
from wcow_agent.cycle.transaction import Restarter
from wcow_agent.host.interfaces import Host, HostError

log = logging.getLogger("wcow_agent")


class UninstallError(RuntimeError):
    pass


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
