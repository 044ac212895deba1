"""The agent's Windows host layer, for real, on a Windows host (never collected by pytest).

Run by ``.github/workflows/windows-agent.yml`` on a ``windows-2022`` runner:
``python -m tests.agent.windows.host_check --expect-build 20348``. Exercises what the Linux
tests can only fake: the registry build read, the Hyper-V check, computecore.dll (load,
enumerate compute systems, service properties) and, through ``write_atomically``, that a
rewritten file keeps its owner, group and DACL and that a symbolic link stays a link.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from wcow_agent.config.files import write_atomically
from wcow_agent.host.computecore import load_computecore
from wcow_agent.host.process import SubprocessRunner
from wcow_agent.host.windows import WindowsRegistryInfo


def _powershell(script: str) -> str:
    result = subprocess.run(
        ["powershell.exe", "-NoLogo", "-NoProfile", "-NonInteractive", "-Command", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def _sddl(path: Path) -> str:
    return _powershell(f"(Get-Acl -LiteralPath '{path}').Sddl")


def check_host(expect_build: int) -> None:
    info = WindowsRegistryInfo(SubprocessRunner())
    build = info.windows_build()
    print(f"registry build: {build.label_value}")
    if build.number != expect_build:
        raise SystemExit(f"expected build 10.0.{expect_build}, the registry says {build}")
    # GitHub's Windows runners have no nested virtualization: the answer is printed, and
    # only a failure to answer fails the check.
    print(f"Hyper-V available: {info.hyperv_available()}")
    hcs = load_computecore()
    systems = hcs.enumerate_compute_systems({}, 60.0)
    print(f"compute systems: {len(systems)}")
    topology = hcs.service_properties(["ProcessorTopology"])
    print(f"HCS ProcessorTopology: {json.dumps(topology)[:300]}")


def check_files() -> None:
    folder = Path(tempfile.mkdtemp(prefix="wcow-files-"))
    config = folder / "config.toml"
    config.write_text("version = 2\n", encoding="utf-8")
    # A custom DACL, not inherited from the folder: what an atomic replace would lose.
    grants = ["/grant:r", "*S-1-5-32-544:F", "*S-1-5-18:F", "/grant:r", "*S-1-5-32-545:R"]
    subprocess.run(
        ["icacls", str(config), "/inheritance:r", *grants],
        check=True,
        capture_output=True,
    )
    before = _sddl(config)
    write_atomically(config, "version = 2\n# rewritten\n")
    after = _sddl(config)
    print(f"SDDL before: {before}\nSDDL after:  {after}")
    if before != after:
        raise SystemExit("the rewritten file lost its owner, group or DACL")
    link = folder / "link.toml"
    os.symlink(config, link)
    write_atomically(link, "version = 2\n# through the link\n")
    if not link.is_symlink() or "through the link" not in config.read_text(encoding="utf-8"):
        raise SystemExit("writing through a symbolic link replaced the link")
    print("file security and symbolic links: ok")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--expect-build", type=int, required=True)
    args = parser.parse_args(argv)
    if sys.platform != "win32":
        print("host_check runs on Windows only", file=sys.stderr)
        return 2
    check_host(args.expect_build)
    check_files()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
