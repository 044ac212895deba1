"""Debian's containerd, for tests that load rendered or merged configs for real."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

CONTAINERD = shutil.which("containerd")

needs_containerd = pytest.mark.skipif(
    CONTAINERD is None,
    reason="containerd is not installed (Debian: apt-get install containerd; `make test` "
    "installs it when it runs as root)",
)


def config_dump(path: Path) -> dict[str, Any]:
    """What containerd makes of ``path`` (``containerd --config PATH config dump``)."""
    assert CONTAINERD is not None
    result = subprocess.run(
        [CONTAINERD, "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tomllib.loads(result.stdout)
