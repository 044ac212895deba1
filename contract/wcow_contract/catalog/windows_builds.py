"""Windows builds that container images are published for, and how they may run.

Sources: hcsshim ``osversion/windowsbuilds.go`` and ``osversion/platform_compat_windows.go``
(CheckHostAndContainerCompat) at 7c9ff7f4 (2026-08-20); Microsoft's container
version-compatibility matrix (MicrosoftDocs/Virtualization-Documentation
``virtualization/windowscontainers/deploy-containers/version-compatibility.md`` at 77e0742a);
the kubelet's ``node.kubernetes.io/windows-build`` label (kubernetes
``pkg/kubelet/kubelet_node_status_windows.go``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WINDOWS_BUILD_LABEL = "node.kubernetes.io/windows-build"


@dataclass(frozen=True)
class Release:
    """A Windows Server release: its build and the names people write for it."""

    build: int
    product: str
    # The image-tag name first (ltsc2022, 1809, ...), then the version names people also type.
    names: tuple[str, ...]


# The one catalog: every Windows Server release Windows container images were published for
# (Microsoft "Windows Server release information"; hcsshim osversion/windowsbuilds.go), with
# the build number the kubelet reports in node.kubernetes.io/windows-build (10.0.<build>).
WINDOWS_SERVER_RELEASES: tuple[Release, ...] = (
    Release(14393, "Windows Server 2016", ("ltsc2016", "1607")),
    Release(16299, "Windows Server, version 1709 (Semi-Annual Channel)", ("1709",)),
    Release(17134, "Windows Server, version 1803 (Semi-Annual Channel)", ("1803",)),
    Release(17763, "Windows Server 2019", ("ltsc2019", "1809")),
    Release(18362, "Windows Server, version 1903 (Semi-Annual Channel)", ("1903",)),
    Release(18363, "Windows Server, version 1909 (Semi-Annual Channel)", ("1909",)),
    Release(19041, "Windows Server, version 2004 (Semi-Annual Channel)", ("2004",)),
    Release(19042, "Windows Server, version 20H2 (Semi-Annual Channel)", ("20H2",)),
    Release(20348, "Windows Server 2022", ("ltsc2022", "21H2")),
    Release(25398, "Windows Server, version 23H2 (Annual Channel)", ("23H2",)),
    Release(26100, "Windows Server 2025", ("ltsc2025", "24H2")),
)

# Version names of Windows client releases only: no Windows Server build carries them, so a
# profile naming one is refused rather than guessed (10.0.<build> still takes any build).
CLIENT_ONLY_NAMES: dict[str, str] = {
    "1703": "Windows 10 1703 (15063); Windows Server had no 1703 release",
    "21H1": "Windows 10 21H1 (19043); the Semi-Annual Channel for Windows Server ended with 20H2",
    "22H2": "Windows 10 22H2 (19045) and Windows 11 22H2 (22621)",
}

# Release names mapped to the build number (node.kubernetes.io/windows-build is 10.0.<build>).
BUILD_ALIASES: dict[str, int] = {
    name: release.build for release in WINDOWS_SERVER_RELEASES for name in release.names
}

# The first Windows Server build (WS2022) from which process isolation accepts a container
# build older than the host: hcsshim CheckHostAndContainerCompat.
PROCESS_DOWNLEVEL_FLOOR = 20348

# The oldest build Kubernetes' Windows support and hcsshim's WCOW code paths cover.
OLDEST_BUILD = 14393

# A build as the kubelet labels it and the agent reports it.
WINDOWS_VERSION_PATTERN = r"^10\.0\.([0-9]{5})$"
_VERSION_RE = re.compile(WINDOWS_VERSION_PATTERN)

# The same grammar as an ECMA regex for the CRD's OpenAPI schema (no inline flags there):
# 10.0.<build> from OLDEST_BUILD (14393) up, so the API server refuses older builds as
# parse_windows_build does.
_BUILD_FROM_OLDEST = r"(1439[3-9]|14[4-9][0-9]{2}|1[5-9][0-9]{3}|[2-9][0-9]{4})"
WINDOWS_BUILD_PATTERN = (
    rf"^(10\.0\.{_BUILD_FROM_OLDEST}|"
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
        """The image-tag name of this build (``ltsc2022``), or None for an uncatalogued build."""
        for release in WINDOWS_SERVER_RELEASES:
            if release.build == self.number:
                return release.names[0]
        return None


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
        client = {name.lower(): why for name, why in CLIENT_ONLY_NAMES.items()}.get(text.lower())
        because = f" ({client})" if client else ""
        raise ValueError(
            f"{value!r} is not a Windows Server build{because}: use 10.0.<build> (as in the "
            f"node label {WINDOWS_BUILD_LABEL}, e.g. 10.0.20348) or one of {accepted_names()}"
        )
    number = int(match.group(1))
    if number < OLDEST_BUILD:
        raise ValueError(
            f"{value!r} is older than Windows Server 2016 (10.0.{OLDEST_BUILD}), "
            "the oldest build Windows containers on Kubernetes support"
        )
    return WindowsBuild(number)


def accepted_names() -> str:
    """The release names, each with its build, for error messages and docs."""
    return ", ".join(
        f"{'/'.join(release.names)} ({release.build})" for release in WINDOWS_SERVER_RELEASES
    )


def check_profile_build(value: str) -> WindowsBuild:
    """``parse_windows_build`` with the CRD's spelling rule: a name as listed or in lower case
    (the API server's pattern cannot ignore case), so the operator and the server agree."""
    build = parse_windows_build(value)
    if re.fullmatch(WINDOWS_BUILD_PATTERN, value) is None:
        raise ValueError(
            f"{value!r}: write release names as listed or in lower case (e.g. "
            f"{build.release or 'ltsc2022'}); accepted: 10.0.<build> or {accepted_names()}"
        )
    return build


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


def isolation_refusal(
    isolation: str, guest: WindowsBuild | None, host: WindowsBuild, hyperv_available: bool
) -> tuple[str, str] | None:
    """(CamelCase reason, sentence) why a host of build ``host`` cannot run a handler of
    this isolation and guest build; None when it can. The agent decides its eligibility with
    it, and the operator checks a node's report against the node's own build with it."""
    if isolation == "HyperV":
        if not hyperv_available:
            return (
                "HyperVUnavailable",
                "Hyper-V is not available on this host (role not installed, or no nested "
                "virtualization)",
            )
        if guest is not None and not hyperv_can_run(host, guest):
            return (
                "HostBuildTooOld",
                f"guest build {guest.label_value} is newer than the host's "
                f"{host.label_value}; Hyper-V isolation needs host build >= guest build",
            )
        return None
    if guest is not None and not process_can_run(host, guest):
        return (
            "ProcessBuildMismatch",
            f"process isolation cannot run build {guest.label_value} images on a "
            f"{host.label_value} host (builds must match, or from 10.0.20348 on, the "
            "guest must be between 10.0.20348 and the host build)",
        )
    return None
