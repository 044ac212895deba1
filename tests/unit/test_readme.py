"""The README shows the two commands, and its tour and examples are what the code prints."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT
from wcow_contract.crd import PRINTER_COLUMNS
from wcow_operator.cli import main as wcow_main

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_shows_the_two_commands() -> None:
    assert "make demo" in README
    assert "make test" in README


def _tour_blocks() -> list[tuple[str, str]]:
    """(source, text) of each README tour block marked ``<!-- tour: SOURCE -->``."""
    blocks = []
    for part in README.split("<!-- tour: ")[1:]:
        source, rest = part.split(" -->\n", 1)
        body = rest.split("\n", 1)[1]  # after the opening fence
        blocks.append((source, body[: body.index("```\n")]))
    return blocks


def test_the_tour_shows_what_make_demo_prints(tmp_path: Path) -> None:
    """The tour's profile is a sample, and its RuntimeClass and TOML are what `make demo`
    (`wcow render deploy/samples --out DIR`) writes for it, byte for byte."""
    assert wcow_main(["render", str(ROOT / "deploy" / "samples"), "--out", str(tmp_path)]) == 0
    blocks = _tour_blocks()
    assert [source for source, _ in blocks] == [
        "deploy/samples/hyperv-ltsc2022.yaml",
        "runtimeclasses.yaml",
        "containerd-config-v2.toml",
    ]
    for source, text in blocks:
        path = ROOT / source if source.startswith("deploy/") else tmp_path / source
        assert text in path.read_text(encoding="utf-8"), f"README tour block from {source}"
    assert "VmMemorySizeInMb = 1024" in blocks[2][1]


def test_the_kubectl_get_wrp_example_has_the_crds_columns() -> None:
    """The example's header is what kubectl prints for the CRD's printer columns (without
    `-o wide`: the priority-0 ones), so a new column shows up in the README too."""
    header = README.split("$ kubectl get wrp\n", 1)[1].split("\n", 1)[0]
    wanted = ["NAME"] + [c["name"].upper() for c in PRINTER_COLUMNS if not c.get("priority")]
    assert re.split(r"\s{2,}", header.strip()) == wanted
