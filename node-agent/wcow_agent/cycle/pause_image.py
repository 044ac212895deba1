"""The node's pause image: which one containerd runs sandboxes from, and of which build.

hcsshim boots a WCOW Hyper-V utility VM from the ``UtilityVM`` folder of the pod sandbox
(pause) container's base layer, so the node's one pause image decides the guest build of
every Hyper-V pod on it (docs/images.md, section 3).

``PauseImages`` reads the key (``config/sandbox_image.py``) from the file containerd runs
(from ``containerd config dump`` when the file leaves it to containerd's default), asks CRI
for the image's ``os.version`` (pulling it first, as containerd's own ``ensureImageExists``
would before the first sandbox) and remembers the answer per reference.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

from wcow_agent.config import toml_text
from wcow_agent.config.sandbox_image import configured_pause_image
from wcow_agent.config.state import AgentState, Paths
from wcow_agent.host.interfaces import Host, HostError
from wcow_contract.v1alpha1 import IMAGE_REFERENCE_MAX, IMAGE_REFERENCE_PATTERN

PULL_TIMEOUT = 300.0
"""A pause image is one base layer (Nano Server: about 100 MB compressed); a pull that takes
longer is tried again next cycle (the cycle's liveness bound counts it)."""
STATUS_TIMEOUT = 30.0
_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
_OS_VERSION = re.compile(r"^10\.0\.([0-9]{5})(\.[0-9]{1,10})?$")


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
    def __init__(self, host: Host, paths: Paths, parse: toml_text.Parse = tomllib.loads) -> None:
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


def wanted_pause_image(flag: str | None, state: AgentState) -> tuple[bool, str | None]:
    """(whether the agent sets the key, to what: None removes it). With ``--pause-image`` it
    sets that image; without it, it puts back the value it replaced while it had one
    (``state.pause_previous``); otherwise it leaves the key alone (today's behaviour)."""
    if flag is not None:
        return True, flag
    if state.pause_held:
        return True, state.pause_previous
    return False, None
