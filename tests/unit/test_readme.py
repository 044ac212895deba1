"""The README's CRD reference is the generated one, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT
from wcow_contract.condition_table import markdown_table as conditions_table
from wcow_contract.crd import PRINTER_COLUMNS
from wcow_contract.reference import markdown_reference
from wcow_operator.cli import main as wcow_main
from wcow_operator.settings import _parser, markdown_settings

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_crd_reference_in_readme_is_current() -> None:
    start = README.index("<!-- crd-reference:start -->\n") + len("<!-- crd-reference:start -->\n")
    end = README.index("<!-- crd-reference:end -->")
    assert README[start:end] == markdown_reference(), (
        "README's CRD reference is stale: regenerate it with `wcow crd --reference`"
    )


def test_reference_lists_every_spec_field() -> None:
    for field in (
        "spec.isolation",
        "spec.vm.memoryMB",
        "spec.containerd.options",
        "spec.scheduling.requireReadyLabel",
        "status.conditions[].reason",
    ):
        assert f"| `{field}` |" in markdown_reference()


def test_readme_shows_the_two_commands() -> None:
    assert "make demo" in README
    assert "make test" in README


def test_settings_table_in_readme_is_current() -> None:
    start = README.index("<!-- settings-reference:start -->\n") + len(
        "<!-- settings-reference:start -->\n"
    )
    end = README.index("<!-- settings-reference:end -->")
    assert README[start:end] == markdown_settings(), (
        "README's Settings table is stale: regenerate it with `make crds`"
    )


def test_settings_table_has_every_flag_and_its_environment_variable() -> None:
    table = markdown_settings()
    for action in _parser()._actions:
        if action.dest == "help":
            continue
        flag = action.option_strings[0].removeprefix("--")
        row = next((line for line in table.splitlines() if f"{flag}" in line.split("|")[1]), "")
        assert row, f"--{flag} is missing from the Settings table"
        # Each flag's help names the environment variable that sets it (the convention the
        # table relies on): WCOW_ + the flag's name.
        assert "WCOW_" in row, f"--{flag}'s help does not name its environment variable"
    for flag in ("--max-unavailable", "--rollout-timeout-seconds", "--webhook-port"):
        assert f"`{flag}`" in table


def test_conditions_tables_are_current() -> None:
    """README's and docs/install.md's conditions tables are the generated one (`make crds`)."""
    start, end = "<!-- conditions:start -->\n", "<!-- conditions:end -->"
    for path in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        text = path.read_text(encoding="utf-8")
        shown = text[text.index(start) + len(start) : text.index(end)]
        assert shown == conditions_table(), f"{path.name}: stale; run `make crds`"
    for type_ in ("RolledOut", "Reconciling", "Stalled"):
        assert f"| `{type_}` |" in conditions_table()


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
