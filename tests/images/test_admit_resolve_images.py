"""`wcow admit --resolve-images [--insecure-registry HOST:PORT]` against the real registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.admission.pods import container, pod
from tests.conftest import profile_document
from tests.control_plane import free_port
from tests.registry import Registry, require_registry, running
from wcow_operator.webhook.image_decision import ORIGINAL_IMAGES


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    require_registry()
    with running(tmp_path / "registry") as started:
        yield started


def _write(path: Path, *documents: Any) -> Path:
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return path


def _admit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wcow_operator.cli", "admit", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_pins_hyperv_pods_refuses_mismatches_and_warns_when_down(
    tmp_path: Path, registry: Registry
) -> None:
    old = registry.push_image("wcow/app", "10.0.17763.1234")
    new = registry.push_image("wcow/app", "10.0.20348.2655")
    registry.push_index("wcow/app", "multi", [old, new])
    registry.push_index("wcow/app", "ltsc2022", [new])
    profiles = _write(
        tmp_path / "profiles.yaml",
        profile_document("guest2019", windowsBuild="ltsc2019"),
        profile_document("proc2022", isolation="Process", windowsBuild="ltsc2022"),
    )
    multi = registry.reference("wcow/app", "multi")
    pinned_pod = pod("guest2019", containers=[dict(container(), image=multi)])
    process_pod = pod("proc2022", containers=[dict(container(), image=multi)])
    pods = _write(tmp_path / "pods.yaml", pinned_pod, process_pod)

    done = _admit("--profiles", str(profiles), "--resolve-images",
                  "--insecure-registry", registry.host, str(pods))  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = list(yaml.safe_load_all(done.stdout))
    assert printed[0]["spec"]["containers"][0]["image"] == registry.reference(
        "wcow/app", old.digest
    )
    assert json.loads(printed[0]["metadata"]["annotations"][ORIGINAL_IMAGES]) == {"app": multi}
    assert printed[1]["spec"]["containers"][0]["image"] == multi  # process: kept

    # Without --resolve-images: no lookups, nothing pinned (the default).
    plain = _admit("--profiles", str(profiles), str(pods))
    assert plain.returncode == 0
    assert next(iter(yaml.safe_load_all(plain.stdout)))["spec"]["containers"][0]["image"] == multi

    only2022 = pod(
        "guest2019",
        containers=[dict(container(), image=registry.reference("wcow/app", "ltsc2022"))],
    )
    refused = _admit("--profiles", str(profiles), "--resolve-images", "--insecure-registry",
                     registry.host, str(_write(tmp_path / "bad.yaml", only2022)))  # fmt: skip
    assert refused.returncode == 1
    assert "refused (ImageBuildMismatch)" in refused.stderr
    assert "'10.0.20348.2655'" in refused.stderr
    assert "10.0.17763 (ltsc2019)" in refused.stderr
    assert "Traceback" not in refused.stderr

    down = f"127.0.0.1:{free_port()}"
    lost = pod("guest2019", containers=[dict(container(), image=f"{down}/wcow/app:multi")])
    warned = _admit("--profiles", str(profiles), "--resolve-images", "--insecure-registry",
                    down, str(_write(tmp_path / "down.yaml", lost)))  # fmt: skip
    assert warned.returncode == 0, warned.stderr
    assert "warning:" in warned.stderr
    assert "cannot be reached" in warned.stderr
    assert next(iter(yaml.safe_load_all(warned.stdout)))["spec"]["containers"][0]["image"].endswith(
        ":multi"
    )
