"""containerd's pause (sandbox) image key in config.toml: read, set (``--pause-image``) and
put back. One key per config schema (docs/agent.md, "Pause images"):

- version 2 (containerd 1.x): ``[plugins."io.containerd.grpc.v1.cri"] sandbox_image``
  (1.7 ``pkg/cri/config/config.go`` ``PluginConfig.SandboxImage``);
- versions 3 and 4 (2.x): ``[plugins."io.containerd.cri.v1.images".pinned_images] sandbox``
  (2.x ``internal/cri/config/config.go`` ``ImageConfig.PinnedImages``, read by
  ``internal/cri/server/podsandbox/sandbox_run.go`` as ``PinnedImage("sandbox")``); a
  version-2 file on 2.x has its ``sandbox_image`` migrated there
  (``plugins/cri/images/plugin.go``).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from typing import Any, Final

import tomlkit

from wcow_agent.config import toml_text
from wcow_agent.config.merge_decision import ConfigError

SANDBOX_IMAGE_KEYS: Final[Mapping[int, tuple[str, ...]]] = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "sandbox_image"),
    3: ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"),
    4: ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"),
}


def configured_pause_image(document: Mapping[str, Any]) -> str | None:
    """The pause image a parsed config.toml (or ``config dump``) names; None when it
    leaves it to containerd's default or has a schema without the key."""
    version = document.get("version", 1)
    path = SANDBOX_IMAGE_KEYS.get(version) if isinstance(version, int) else None
    node: Any = document
    for name in path or ():
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, str) and node:
        return node
    if version in (3, 4):  # a version-2 table that 2.x migrates (plugins/cri/images)
        legacy = (document.get("plugins") or {}).get("io.containerd.grpc.v1.cri") or {}
        value = legacy.get("sandbox_image") if isinstance(legacy, dict) else None
        return value if isinstance(value, str) and value else None
    return None


def pause_image_key(version: int) -> str:
    """The key's TOML path, for messages."""
    *tables, key = SANDBOX_IMAGE_KEYS[version]
    return f"[{toml_text.format_key(tuple(tables))}] {key}"


def with_pause_image(text: str, version: int, image: str | None) -> str:
    """config.toml with the pause image key of its schema set to ``image`` (None: removed),
    everything else as it was (a tomlkit round trip, checked by parsing the result)."""
    path = SANDBOX_IMAGE_KEYS.get(version)
    if path is None:
        raise ConfigError(f"config.toml version {version} has no known pause image key")
    before = tomllib.loads(text)
    if _lookup(before, path) == image:
        return text
    document = tomlkit.parse(text)
    node: Any = document
    for depth, name in enumerate(path[:-1]):
        if name not in node:
            last = depth == len(path) - 2
            node.add(name, tomlkit.table(is_super_table=not last))
        node = node[name]
    if image is None:
        node.pop(path[-1], None)
        _drop_if_empty(document, path[:-1])
    else:
        node[path[-1]] = image
    result = tomlkit.dumps(document)
    if _without(tomllib.loads(result), path) != _with(before, path, image):
        raise ConfigError(
            f"cannot set the pause image in config.toml's layout: set {pause_image_key(version)}"
            f" = {image!r} by hand, or drop --pause-image"
        )
    return result


def held_pause_image(text: str, version: int) -> str | None:
    """The value of the pause image key in the file itself (None: absent)."""
    path = SANDBOX_IMAGE_KEYS.get(version)
    value = _lookup(tomllib.loads(text), path) if path else None
    return value if isinstance(value, str) else None


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = data
    for name in path:
        node = node.get(name) if isinstance(node, dict) else None
    return node


def _drop_if_empty(document: Any, path: tuple[str, ...]) -> None:
    """Remove the tables along ``path`` that removing the key left empty (the agent's own
    ``pinned_images`` table, say), deepest first."""
    for depth in range(len(path), 0, -1):
        parent = document
        for name in path[: depth - 1]:
            parent = parent[name]
        child = parent.get(path[depth - 1])
        if isinstance(child, dict) and len(child) == 0:
            del parent[path[depth - 1]]
        else:
            return


def _with(data: Mapping[str, Any], path: tuple[str, ...], value: str | None) -> dict[str, Any]:
    result = json.loads(json.dumps(data, default=str))
    node = result
    for name in path[:-1]:
        node = node.setdefault(name, {})
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return _without(result, path)


def _without(data: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """``data`` (as JSON) with the empty tables along ``path`` dropped, for comparing."""
    result: dict[str, Any] = json.loads(json.dumps(data, default=str))
    chain = []
    node = result
    for name in path[:-1]:
        if not isinstance(node.get(name), dict):
            break
        chain.append((node, name))
        node = node[name]
    for parent, name in reversed(chain):
        if parent[name] == {}:
            del parent[name]
    return result
