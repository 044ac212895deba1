"""RKE2's config template rendered with Go's text/template (tools/template-render), as k3s
renders config.toml from config-v3.toml.tmpl at every start; see that tool's README for
what it is and is not."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

TOOL = ROOT / "tools" / "template-render"
BASE_TEMPLATE = ROOT / "tests" / "fixtures" / "distributions" / "rke2-windows-config-v3.toml.tmpl"
RKE2 = r"C:\var\lib\rancher\rke2"
# The inputs k3s's config_windows.go gives the template on an RKE2 Windows agent, as the
# rendered fixture rke2-windows-config.toml names them.
RKE2_DATA: dict[str, Any] = {
    "Program": "",
    "NodeConfig": {
        "Containerd": {
            "Root": RKE2 + r"\agent\containerd",
            "State": RKE2 + r"\agent\containerd\state",
            "Opt": RKE2 + r"\agent\containerd",
            "Address": "npipe:////./pipe/containerd-containerd",
            "Template": RKE2 + r"\agent\etc\containerd",
            "Registry": RKE2 + r"\agent\etc\containerd\certs.d",
            "BlockIOConfig": "",
            "RDTConfig": "",
        },
        "AgentConfig": {
            "Snapshotter": "windows",
            "PauseImage": "index.docker.io/rancher/mirrored-pause:3.10.2",
            "CNIBinDir": r"c:\var\lib\rancher\rke2\bin",
            "CNIConfDir": r"c:\var\lib\rancher\rke2\agent\etc\cni",
            "ImageServiceSocket": "",
        },
        "SELinux": False,
        "DefaultRuntime": "runhcs-wcow-process",
    },
    "DisableCgroup": True,
    "SystemdCgroup": False,
    "IsRunningInUserNS": False,
    "EnableUnprivileged": False,
    "NoDefaultEndpoint": False,
    "NonrootDevices": False,
    "PrivateRegistryConfig": None,
    "ExtraRuntimes": {},
}


def base_template() -> str:
    """k3s's template text, without the two lines of this project naming its source."""
    text = BASE_TEMPLATE.read_text(encoding="utf-8")
    return text[text.index("{{- /* */ -}}") :]


@functools.cache
def _binary() -> Path:
    go = shutil.which("go")
    assert go is not None, "go is not on PATH"
    folder = Path(tempfile.mkdtemp(prefix="wcow-template-render-"))
    atexit.register(shutil.rmtree, folder, True)
    binary = folder / "template-render"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=TOOL, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return binary


def render(user: str | None, data: dict[str, Any] | None = None) -> str:
    """config.toml as k3s renders it: the user's template (None: none, the base alone)."""
    with tempfile.TemporaryDirectory(prefix="wcow-render-") as scratch:
        folder = Path(scratch)
        (folder / "base.tmpl").write_text(base_template(), encoding="utf-8")
        (folder / "data.json").write_text(json.dumps(data or RKE2_DATA), encoding="utf-8")
        args = [str(_binary()), "-base", str(folder / "base.tmpl")]
        if user is not None:
            (folder / "user.tmpl").write_text(user, encoding="utf-8")
            args += ["-user", str(folder / "user.tmpl")]
        args += ["-data", str(folder / "data.json"), "-out", str(folder / "out.toml")]
        ran = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert ran.returncode == 0, ran.stderr
        return (folder / "out.toml").read_text(encoding="utf-8")
