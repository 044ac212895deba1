"""promtool, Prometheus' own rule checker, for the tests of the chart's alerts and dashboard.

Built from the version pinned in tools/promtool/go.mod into .cache/promtool/bin/promtool
(tools/promtool/build.sh; `make test` builds it when Go is there). Tests that need it call
``promtool()``: it skips with the reason when the binary is missing, and fails instead under
``WCOW_E2E_REQUIRED=1``, as the test registry's tests do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.built_tools import require_built
from tests.conftest import ROOT

BIN = ROOT / ".cache" / "promtool" / "bin" / "promtool"
BUILD_SCRIPT = ROOT / "tools" / "promtool" / "build.sh"
TIMEOUT_SECONDS = 120


def promtool() -> Path:
    """The binary; skip (or, under ``WCOW_E2E_REQUIRED=1``, fail) when it is not built."""
    return require_built(BIN, "promtool", BUILD_SCRIPT)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS...``, its output captured (promtool prints its findings on both)."""
    return subprocess.run(
        [str(promtool()), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        cwd=ROOT,
    )
