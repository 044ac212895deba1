"""The README's CRD reference is the generated one, and its commands exist."""

from __future__ import annotations

from tests.conftest import ROOT
from wcow_contract.reference import markdown_reference

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
