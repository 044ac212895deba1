"""Files of a Go module pinned in a tools/ folder (the Go module cache; downloaded from the Go
module proxy on first use): the CRDs of cert-manager and the Prometheus Operator."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path


class GoModuleUnavailableError(RuntimeError):
    pass


@functools.cache
def module_dir(tools: Path, module: str) -> Path:
    """Where the module pinned in ``tools``/go.mod is unpacked (raises without Go)."""
    go = shutil.which("go")
    if go is None:
        raise GoModuleUnavailableError(
            f"go is not on PATH: the files of {module} come from the module pinned in "
            f"{tools.name}/go.mod"
        )
    found = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=tools, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if found.returncode != 0:
        raise GoModuleUnavailableError(f"go mod download {module}: {found.stderr.strip()}")
    return Path(json.loads(found.stdout)["Dir"])
