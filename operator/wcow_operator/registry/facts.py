"""What a registry says about an image reference (``ImageFacts``: an index's entries with
their platform, or the one manifest the reference names with the platform of its config), or
why it could not say (``LookupFailure``). The registry client (``registry.client``) makes
them; the webhook's image decision (``webhook.image_decision``) reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OS_VERSION = re.compile(r"10\.0\.([0-9]{4,6})(\.[0-9]{1,10})?")


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    os_version: str = ""

    @property
    def build(self) -> int | None:
        """The build of ``os.version`` (``10.0.<build>[.<revision>]``), None when absent or
        of another form."""
        match = _OS_VERSION.fullmatch(self.os_version)
        return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Entry:
    """One image manifest: its digest and platform (None: an index entry without one)."""

    digest: str
    platform: Platform | None


@dataclass(frozen=True)
class ImageFacts:
    """What a reference resolved to: an index and its entries, or one manifest (one entry,
    the platform read from its config)."""

    repository: str  # the reference without tag or digest, as the user wrote it
    digest: str  # of what the reference names
    index: bool
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class LookupFailure:
    """Why a reference could not be read. ``cause`` is the metric label."""

    cause: str  # Unreachable, Timeout, Unauthorized, NotFound, ServerError, TooLarge, Malformed
    message: str


Facts = ImageFacts | LookupFailure


def repository_of(reference: str) -> str:
    """``reference`` without its digest and tag (``host:port/path`` keeps its port)."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name
