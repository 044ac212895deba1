"""The node's pause image: which one containerd runs sandboxes from, and of which build.

hcsshim boots a WCOW Hyper-V utility VM from the ``UtilityVM`` folder of the pod sandbox
(pause) container's base layer, so the node's one pause image decides the guest build of
every Hyper-V pod on it (docs/images.md, section 3). containerd names it in one key per
config schema (docs/agent.md, "Pause images"):

- version 2 (containerd 1.x): ``[plugins."io.containerd.grpc.v1.cri"] sandbox_image``
  (1.7 ``pkg/cri/config/config.go`` ``PluginConfig.SandboxImage``);
- versions 3 and 4 (2.x): ``[plugins."io.containerd.cri.v1.images".pinned_images] sandbox``
  (2.x ``internal/cri/config/config.go`` ``ImageConfig.PinnedImages``, read by
  ``internal/cri/server/podsandbox/sandbox_run.go`` as ``PinnedImage("sandbox")``); a
  version-2 file on 2.x has its ``sandbox_image`` migrated there
  (``plugins/cri/images/plugin.go``).

``PauseImages`` reads the key from the file containerd runs (from ``containerd config dump``
when the file leaves it to containerd's default), asks CRI for the image's ``os.version``
(pulling it first, as containerd's own ``ensureImageExists`` would before the first
sandbox) and remembers the answer per reference.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import tomlkit

from wcow_agent import tomltext
from wcow_agent.host.interfaces import Host, HostError
from wcow_agent.merge import ConfigError
from wcow_agent.state import AgentState, Paths
from wcow_contract.v1alpha1 import IMAGE_REFERENCE_MAX, IMAGE_REFERENCE_PATTERN

SANDBOX_IMAGE_KEYS: Final[Mapping[int, tuple[str, ...]]] = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "sandbox_image"),
    3: ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"),
    4: ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"),
}
PULL_TIMEOUT = 300.0
"""A pause image is one base layer (Nano Server: about 100 MB compressed); a pull that takes
longer is tried again next cycle (the cycle's liveness bound counts it)."""
STATUS_TIMEOUT = 30.0
_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
_OS_VERSION = re.compile(r"^10\.0\.([0-9]{5})(\.[0-9]{1,10})?$")


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


def _checked(image: str) -> str:
    """The reference goes to crictl as an argument: only an image reference does."""
    if not _REFERENCE.fullmatch(image) or len(image) > IMAGE_REFERENCE_MAX:
        raise HostError(f"the pause image {image[:200]!r} is not an image reference")
    return image


def build_of(os_version: str) -> str | None:
    """``10.0.17763`` of an image's ``os.version`` (``10.0.17763.1234``); None when the
    image names no Windows build."""
    match = _OS_VERSION.match(os_version)
    return f"10.0.{match.group(1)}" if match else None


@dataclass(frozen=True)
class PauseImage:
    image: str
    build: str | None
    """The build of the image's config (``os.version``); None when it names none."""


class PauseImages:
    def __init__(self, host: Host, paths: Paths, parse: tomltext.Parse = tomllib.loads) -> None:
        self.host = host
        self.paths = paths
        self.parse = parse
        """Reads config.toml (the agent's ``ParseOnce``: the merge read the same text)."""
        self._versions: dict[str, str] = {}

    def forget(self) -> None:
        """containerd restarted with another file: ask again."""
        self._versions.clear()

    def current(self) -> PauseImage:
        """The pause image of the file containerd runs, and its build. Raises HostError
        (CRI or containerd did not answer) or ValueError (the file is unreadable)."""
        image = self._configured()
        version = self._versions.get(image)
        if version is None:
            version = self._os_version(image)
            self._versions[image] = version
        return PauseImage(image, build_of(version))

    def _configured(self) -> str:
        config = self.paths.config
        text = config.read_text(encoding="utf-8") if config.exists() else None
        if text is not None:
            image = configured_pause_image(self.parse(text))
            if image is not None:
                return _checked(image)
            dump = self.host.containerd.config_dump(config)
        else:
            dump = self.host.containerd.config_default()
        image = configured_pause_image(tomllib.loads(dump))
        if image is None:
            raise HostError("containerd's configuration names no pause (sandbox) image")
        return _checked(image)

    def _os_version(self, image: str) -> str:
        cri = self.host.cri
        version = cri.image_os_version(image, STATUS_TIMEOUT)
        if version is None:
            cri.pull_image(image, PULL_TIMEOUT)
            version = cri.image_os_version(image, STATUS_TIMEOUT)
        if version is None:
            raise HostError(f"containerd holds no image {image} after pulling it")
        return version


# -- managing the pause image (``--pause-image``) ------------------------------------------


def pause_image_key(version: int) -> str:
    """The key's TOML path, for messages."""
    *tables, key = SANDBOX_IMAGE_KEYS[version]
    return f"[{tomltext.format_key(tuple(tables))}] {key}"


def wanted_pause_image(flag: str | None, state: AgentState) -> tuple[bool, str | None]:
    """(whether the agent sets the key, to what: None removes it). With ``--pause-image`` it
    sets that image; without it, it puts back the value it replaced while it had one
    (``state.pause_previous``); otherwise it leaves the key alone (today's behaviour)."""
    if flag is not None:
        return True, flag
    if state.pause_held:
        return True, state.pause_previous
    return False, None


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
