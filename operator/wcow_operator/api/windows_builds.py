"""Windows builds that container images are published for, and how they may run.

Sources: hcsshim ``osversion/windowsbuilds.go`` and ``osversion/platform_compat_windows.go``,
Microsoft's container version-compatibility matrix (see
``shared/reference/windows-runtime-facts.md`` section 5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WINDOWS_BUILD_LABEL = "node.kubernetes.io/windows-build"

# Release aliases people write in image tags, mapped to the build number the kubelet
# reports in node.kubernetes.io/windows-build (10.0.<build>).
BUILD_ALIASES: dict[str, int] = {
    "ltsc2016": 14393,
    "1809": 17763,
    "ltsc2019": 17763,
    "1903": 18362,
    "1909": 18363,
    "2004": 19041,
    "20H2": 19042,
    "ltsc2022": 20348,
    "23H2": 25398,
    "ltsc2025": 26100,
}

# The first Windows Server build (WS2022) from which process isolation accepts a container
# build older than the host: hcsshim CheckHostAndContainerCompat.
PROCESS_DOWNLEVEL_FLOOR = 20348

# The oldest build Kubernetes' Windows support and hcsshim's WCOW code paths cover.
OLDEST_BUILD = 14393

_VERSION_RE = re.compile(r"^10\.0\.([0-9]{5})$")

# The same grammar as an ECMA regex for the CRD's OpenAPI schema (no inline flags there).
WINDOWS_BUILD_PATTERN = (
    r"^(10\.0\.[0-9]{5}|"
    + "|".join(sorted({a for alias in BUILD_ALIASES for a in (alias, alias.lower())}))
    + ")$"
)


@dataclass(frozen=True)
class WindowsBuild:
    """A Windows build number, e.g. 20348, with the label value the kubelet reports."""

    number: int

    @property
    def label_value(self) -> str:
        return f"10.0.{self.number}"

    @property
    def release(self) -> str | None:
        """The newest alias for this build (``ltsc2022``), or None for an uncatalogued build."""
        names = [alias for alias, number in BUILD_ALIASES.items() if number == self.number]
        return names[-1] if names else None


def parse_windows_build(value: str) -> WindowsBuild:
    """Parse ``10.0.<build>`` or a release alias (case-insensitive) into a build.

    Raises ValueError with the accepted forms when the value is neither.
    """
    text = value.strip()
    for alias, number in BUILD_ALIASES.items():
        if text.lower() == alias.lower():
            return WindowsBuild(number)
    match = _VERSION_RE.match(text)
    if match is None:
        aliases = ", ".join(BUILD_ALIASES)
        raise ValueError(
            f"{value!r} is not a Windows build: use 10.0.<build> (as in the node label "
            f"{WINDOWS_BUILD_LABEL}, e.g. 10.0.20348) or one of {aliases}"
        )
    number = int(match.group(1))
    if number < OLDEST_BUILD:
        raise ValueError(
            f"{value!r} is older than Windows Server 2016 (10.0.{OLDEST_BUILD}), "
            "the oldest build Windows containers on Kubernetes support"
        )
    return WindowsBuild(number)


def hyperv_can_run(host: WindowsBuild, guest: WindowsBuild) -> bool:
    """Hyper-V isolation runs any guest build up to the host's own."""
    return guest.number <= host.number


def process_can_run(host: WindowsBuild, guest: WindowsBuild) -> bool:
    """Process isolation as hcsshim decides: equal builds, or from WS2022 on any guest
    from the WS2022 build up to the host build."""
    if guest.number == host.number:
        return True
    if host.number >= PROCESS_DOWNLEVEL_FLOOR:
        return PROCESS_DOWNLEVEL_FLOOR <= guest.number <= host.number
    return False
