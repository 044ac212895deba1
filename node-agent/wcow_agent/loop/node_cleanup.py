"""Letting go of the Node: the agent's labels and annotations removed (``clean_node``), and
the running agent's uninstall on the plan's signal, the host first (``let_go``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.cycle.host_cleanup import UninstallError
from wcow_agent.host.interfaces import HostError
from wcow_agent.loop.cluster import Cluster
from wcow_contract.text import printable
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION, parse_agent_status
from wcow_contract.wire.uninstall import MAX_ERROR_CHARS, UNINSTALL_ERROR_ANNOTATION, node_cleanup

log = logging.getLogger("wcow_agent")


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
