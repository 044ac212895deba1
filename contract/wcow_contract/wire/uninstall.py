"""Uninstall: the signal the operator's ``wcow-operator uninstall`` gives the agents, and what
a clean Node is.

The signal is an annotation on the plan ConfigMap (``runtime.wcow.dev/uninstall``: when it was
given). Annotations are not the plan's bytes, and only the identities the plan-writers policy
allows may set it, the same ones that may write the plan. An agent that sees it removes every
table it owns, puts the pause image key back, deletes its files, and then removes its labels
and annotations from its Node: a Node with none of them left is clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from wcow_contract.labels import (
    CONTAINERD_LINE_LABEL,
    GUEST_BUILD_LABEL_PREFIX,
    GUEST_BUILD_VALUE,
    HYPERV_LABEL,
    READY_VALUE,
    ready_label,
)
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

UNINSTALL_ANNOTATION: Final = "runtime.wcow.dev/uninstall"
"""On the plan ConfigMap: the agents uninstall themselves from their nodes."""
UNINSTALL_ERROR_ANNOTATION: Final = "runtime.wcow.dev/uninstall-error"
"""On a Node: why its agent could not uninstall (kept until it can)."""
CANARY_REQUEST_ANNOTATION: Final = "runtime.wcow.dev/canary-request"
"""On a Node: a canary asked for (``kubectl annotate``); meaningless without an agent."""
MAX_ERROR_CHARS: Final = 1024

CAPABILITY_LABELS: Final = (HYPERV_LABEL, CONTAINERD_LINE_LABEL)
_ANNOTATIONS: Final = (AGENT_STATUS_ANNOTATION, UNINSTALL_ERROR_ANNOTATION)


def leftovers(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[str]:
    """The keys on a Node that only an agent writes and its uninstall removes: ready labels,
    capability labels, the status annotation, an uninstall error. Empty: the Node is clean.
    Guest-build labels are not counted: a node pool's template may set them, and the agent
    removes only those its status reported (``node_cleanup``)."""
    ready = ready_label("")
    keys = [k for k, v in labels.items() if k.startswith(ready) and v == READY_VALUE]
    keys += [k for k in CAPABILITY_LABELS if k in labels]
    keys += [k for k in _ANNOTATIONS if k in annotations]
    return sorted(keys)


def node_cleanup(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    reported_guest_builds: Iterable[str],
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The (labels, annotations) merge patch that leaves a Node clean: every leftover, the
    guest-build labels of the builds the agent's status reported (``10.0.N``), and a canary
    request nobody will serve."""
    keys = set(leftovers(labels, annotations))
    for build in reported_guest_builds:
        key = f"{GUEST_BUILD_LABEL_PREFIX}{build.rsplit('.', 1)[-1]}"
        if labels.get(key) == GUEST_BUILD_VALUE:
            keys.add(key)
    if CANARY_REQUEST_ANNOTATION in annotations:
        keys.add(CANARY_REQUEST_ANNOTATION)
    label_patch: dict[str, str | None] = {k: None for k in sorted(keys) if k in labels}
    annotation_patch: dict[str, str | None] = {k: None for k in sorted(keys) if k in annotations}
    return label_patch, annotation_patch
