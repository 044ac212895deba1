"""containerd's own config loading, one release line at a time (tools/containerd-decode).

``effective_config(line, root)`` asks a line what a root config.toml becomes with its
imports, the way that containerd's daemon loads it: the Go test ``TestEffectiveConfig`` of the
line's module, built once per test session (``go test -c``, from Go's build cache after the
first time) and run once per file. tests/containerd.py is Debian's containerd binary instead.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

GO = shutil.which("go")

TOOLS = ROOT / "tools" / "containerd-decode"
# The line -> the Go module that pins that containerd (see its go.mod).
MODULES = {"1.7": TOOLS / "v1.7", "2.2": TOOLS / "v2", "2.3": TOOLS / "v2.3"}
LINES = tuple(MODULES)

needs_go = pytest.mark.skipif(
    GO is None,
    reason="go is not on PATH: containerd's own config loading (tools/containerd-decode) "
    "needs the Go toolchain (1.26.3 or newer for containerd 2.3) and the Go module proxy",
)

# A cold first build downloads the modules and compiles containerd's packages.
BUILD_TIMEOUT = 1800


@functools.cache
def _test_binary(line: str) -> Path:
    """The line's Go test binary, built into a folder removed when the session ends."""
    assert GO is not None
    folder = Path(tempfile.mkdtemp(prefix=f"wcow-containerd-{line}-"))
    atexit.register(shutil.rmtree, folder, True)
    binary = folder / "line.test"
    built = subprocess.run(
        [GO, "test", "-c", "-o", str(binary), "."],
        cwd=MODULES[line],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert built.returncode == 0, f"building {MODULES[line]}:\n{built.stdout}{built.stderr}"
    return binary


def effective_config(line: str, root: Path) -> dict[str, Any]:
    """What containerd ``line`` ("1.7", "2.2" or "2.3") makes of ``root`` and its imports:
    ``{"line", "version", "imports": [files read, root first], "runtimes": {handler:
    {"runtime_type", "runtime_path", "options", "options_decoded", "options_error",
    "undecoded_options", "pod_annotations", "container_annotations", "snapshotter"}},
    "default_runtime_name", "sandbox_image", "snapshotter", "error"}``. A file the line
    refuses gives ``error`` (its text) and nulls; see tools/containerd-decode/README.md."""
    binary = _test_binary(line)
    with tempfile.TemporaryDirectory(prefix="wcow-effective-") as scratch:
        out = Path(scratch) / "effective.json"
        # the test runs in the module folder: a relative path would be read from there
        env = {"WCOW_EFFECTIVE_CONFIG": str(root.absolute()), "WCOW_EFFECTIVE_OUT": str(out)}
        ran = subprocess.run(
            [str(binary), "-test.run", "^TestEffectiveConfig$", "-test.count", "1"],
            cwd=MODULES[line],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, f"{line}: {ran.stdout}{ran.stderr}"
        loaded: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return loaded


def loads(line: str, root: Path) -> dict[str, Any]:
    """The effective configuration, which must have loaded."""
    loaded = effective_config(line, root)
    assert loaded["error"] is None, f"{line} refuses {root}: {loaded['error']}"
    return loaded


def assert_handler(loaded: dict[str, Any], name: str, table: dict[str, Any]) -> None:
    """``name`` is a handler with this table, every option decoded into runhcs Options."""
    assert name in loaded["runtimes"], sorted(loaded["runtimes"])
    got = loaded["runtimes"][name]
    assert got["runtime_type"] == table["runtime_type"]
    assert got["pod_annotations"] == table.get("pod_annotations", [])
    assert got["container_annotations"] == table.get("container_annotations", [])
    assert got["options_decoded"], got
    assert got["options"] == table["options"]
    assert got["undecoded_options"] == []
