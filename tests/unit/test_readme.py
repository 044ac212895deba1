"""The README's CRD reference is the generated one, and its commands exist."""

from __future__ import annotations

from tests.conftest import ROOT
from wcow_contract.reference import markdown_reference
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
