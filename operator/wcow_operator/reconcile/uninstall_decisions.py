"""What ``wcow-operator uninstall`` decides, pure: the plan ConfigMap with and without the
uninstall signal, and which Windows Nodes are not clean yet (and why)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from wcow_contract.text import printable
from wcow_contract.v1alpha1 import GROUP, KIND
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_contract.wire.plan import PLAN_KEY
from wcow_contract.wire.uninstall import UNINSTALL_ANNOTATION, UNINSTALL_ERROR_ANNOTATION, leftovers

MAX_LISTED: Final = 50  # nodes named in the report; the rest are counted


def with_signal(config_map: Mapping[str, Any], value: str | None) -> dict[str, Any]:
    """The plan ConfigMap as read, with ``runtime.wcow.dev/uninstall: value`` (None: without
    it); data, labels and the other annotations untouched (the plan's bytes do not change)."""
    body = copy.deepcopy(dict(config_map))
    metadata = body.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    if value is None:
        annotations.pop(UNINSTALL_ANNOTATION, None)
    else:
        annotations[UNINSTALL_ANNOTATION] = value
    metadata["annotations"] = annotations
    metadata.pop("managedFields", None)
    return body


def plan_handlers(config_map: Mapping[str, Any] | None) -> list[str]:
    """The handlers the plan ConfigMap names ([] without one, or with no readable plan)."""
    text = ((config_map or {}).get("data") or {}).get(PLAN_KEY)
    try:
        handlers = json.loads(text).get("handlers") if text else None
    except (ValueError, AttributeError):
        return []
    return sorted(handlers) if isinstance(handlers, dict) else []


def signal_of(config_map: Mapping[str, Any] | None) -> str | None:
    annotations = ((config_map or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(UNINSTALL_ANNOTATION)
    return None if value is None else str(value)


def not_clean(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> what its agent has left on it (and why, when it said), for each Windows
    Node that still carries an agent-written key."""
    found: dict[str, str] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        keys = leftovers(labels, annotations)
        if not keys:
            continue
        error = annotations.get(UNINSTALL_ERROR_ANNOTATION)
        if error:
            why = f"its agent failed: {printable(str(error), 300)}"
        elif AGENT_STATUS_ANNOTATION in annotations:
            why = "no answer from its agent (not running, or cannot reach the API server?)"
        else:
            why = "labels left"
        found[str(metadata.get("name", ""))] = f"{why}; left: {', '.join(keys)}"
    return dict(sorted(found.items()))


def report(left: Mapping[str, str], total: int) -> list[str]:
    """The lines printed when the wait ends with nodes not clean."""
    lines = [f"{len(left)} of {total} Windows node(s) not clean:"]
    lines += [f"  {name}: {why}" for name, why in list(left.items())[:MAX_LISTED]]
    if len(left) > MAX_LISTED:
        lines.append(f"  ... and {len(left) - MAX_LISTED} more")
    lines.append(
        "Clean each by hand on the node: `wcow-agent uninstall` (as the agent's pod does, with "
        "NODE_NAME set to remove its labels), or fix it and run the uninstall again."
    )
    return lines


def owned_runtime_classes(runtime_classes: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(name, uid) of each RuntimeClass a WindowsRuntimeProfile controls (its controller
    reference), which are the operator's: run once the profiles are gone."""
    found = []
    for runtime_class in runtime_classes:
        metadata = runtime_class.get("metadata") or {}
        for reference in metadata.get("ownerReferences") or []:
            if (
                reference.get("controller")
                and reference.get("kind") == KIND
                and str(reference.get("apiVersion", "")).split("/")[0] == GROUP
            ):
                found.append((str(metadata.get("name")), str(metadata.get("uid"))))
                break
    return sorted(found)
