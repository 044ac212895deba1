"""Reading a pod of any shape, bounded: an absent or null field is empty, another type is
refused (``MalformedPod``), and more containers, annotations or node-affinity items than a
decision walks are refused (``PodTooLarge``).

A pod object is at most ~1.5 MB (etcd) and the webhook reads at most 1 MiB (aiohttp's
client_max_size in kopf's server); the bounds keep the walk far inside 50 ms per pod of
100 containers, on any body that fits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from wcow_contract.text import shown
from wcow_operator.webhook.decision import MALFORMED_POD, POD_TOO_LARGE, Refusal

# What one decision walks at most. A pod object is at most ~1.5 MB (etcd) and the webhook
# reads at most 1 MiB (aiohttp's client_max_size in kopf's server); these keep the walk far
# inside the 50 ms the issue allows per pod of 100 containers, on any body that fits.
MAX_CONTAINERS: Final = 256  # containers + initContainers + ephemeralContainers

MAX_ANNOTATIONS: Final = 1024

MAX_SELECTOR_ITEMS: Final = 1024  # node affinity terms, expressions and values together


def mapping(holder: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``holder[key]`` as an object: absent or null is empty, another type is refused."""
    found = holder.get(key)
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise Refusal(MALFORMED_POD, f"{where}.{key} is {shown(found)}, not an object")
    return found


def sequence(holder: Mapping[str, Any], key: str, where: str) -> list[Any]:
    found = holder.get(key)
    if found is None:
        return []
    if not isinstance(found, list):
        raise Refusal(MALFORMED_POD, f"{where}.{key} is {shown(found)}, not a list")
    return found


def objects(holder: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = sequence(holder, key, where)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise Refusal(MALFORMED_POD, f"{where}.{key}[{index}] is {shown(item)}, not an object")
    return items


def container_name(container: Mapping[str, Any], index: int) -> str:
    """A container as messages name it: its name when it is a plain DNS label, else its index."""
    name = container.get("name")
    if isinstance(name, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        return name
    return str(index)


def pod_metadata(pod: Mapping[str, Any]) -> dict[str, Any]:
    return mapping(pod, "metadata", "")


def pod_spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    return mapping(pod, "spec", "")


def pod_annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    found = mapping(pod_metadata(pod), "annotations", "metadata")
    if len(found) > MAX_ANNOTATIONS:
        raise Refusal(
            POD_TOO_LARGE,
            f"metadata.annotations has {len(found)} entries; a pod of a wcow RuntimeClass may "
            f"have at most {MAX_ANNOTATIONS}",
        )
    return found


CONTAINER_FIELDS: Final = ("initContainers", "containers", "ephemeralContainers")


def all_containers(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found = {field: objects(spec, field, "spec") for field in CONTAINER_FIELDS}
    count = sum(len(items) for items in found.values())
    if count > MAX_CONTAINERS:
        raise Refusal(
            POD_TOO_LARGE,
            f"the pod has {count} containers (init and ephemeral included); a pod of a wcow "
            f"RuntimeClass may have at most {MAX_CONTAINERS}",
        )
    return found
