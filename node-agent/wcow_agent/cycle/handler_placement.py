"""The cycle's placement step: where this node's handlers go (``config/placement.py``), the
node's files read for it, and the change that puts them there (``config/placing.py``).

Also what the cycle says of it: conflicts (a table of the agent's name in any file
containerd loads), drift repaired, and a configuration the node rewrote behind the agent
(an AKS reimage, WMCO copying its file back, kube-up at boot) written again.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from wcow_agent.config.containerd_lines import config_version_for
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.placed import Ownership, Placed, Settings
from wcow_agent.config.placement import Placement
from wcow_agent.config.placing import place_handlers
from wcow_agent.config.state import AgentState
from wcow_agent.config.toml_text import Parse
from wcow_agent.cycle.decisions import CycleReport, builtin_runtimes_for


class PlacementRefusedError(ConfigError):
    """The node cannot be placed (``placement.reason`` says why)."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement.message)
        self.placement = placement


@dataclass(frozen=True)
class NodeText:
    """config.toml as the cycle read it."""

    text: str
    created: bool
    """There is none: ``text`` is containerd's defaults."""


def ownership_of(state: AgentState) -> Ownership:
    return Ownership(state.owned, state.adopted, state.adopted_from, state.placement)


def decide(
    files: NodeFiles, containerd_version: str | None, root: NodeText, parse: Parse
) -> Placement:
    """Where the handlers go (a ``ConfigError`` when config.toml is not TOML)."""
    try:
        document = parse(root.text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config.toml is not valid TOML: {error}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError("config.toml is refused: values nested too deeply") from None
    return files.decide(containerd_version, document)


def place_on_node(
    files: NodeFiles,
    root: NodeText,
    desired: Mapping[str, Mapping[str, Any]],
    state: AgentState,
    containerd_version: str | None,
    *,
    adopt: Collection[str] = (),
    parse: Parse = tomllib.loads,
) -> Placed:
    """The change that gives this node exactly ``desired`` (nothing written yet). Raises
    ``PlacementRefusedError`` when the node cannot be placed and handlers are wanted, and
    ``ConfigError`` when a file cannot be edited."""
    placement = decide(files, containerd_version, root, parse)
    if placement.way is None and desired:
        raise PlacementRefusedError(placement)
    ownership = ownership_of(state)
    node = files.read(placement, root.text, root.created, ownership, parse)
    settings = Settings(
        builtins=builtin_runtimes_for(containerd_version),
        fallback_version=config_version_for(containerd_version) if containerd_version else None,
        adopt=adopt,
        parse=parse,
    )
    return place_handlers(placement, node, desired, ownership, settings)


def note_rewrite(report: CycleReport, placed: Placed, changed_elsewhere: bool) -> None:
    """The node rewrote its configuration behind the agent and the agent writes its part
    again: said with an event, a metric (``wcow_agent_config_rewrites_total``) and on the
    Node's status (``placement.lastRewrite``)."""
    if not changed_elsewhere or not placed.changed():
        return
    report.rewritten = [str(edit.path) for edit in placed.edits()]
    report.event(
        "ConfigRewritten",
        "the node rewrote containerd's configuration behind the agent (a reimage, its "
        "installer, a hand edit); writing the agent's handlers again: "
        + ", ".join(report.rewritten),
        warning=True,
    )
