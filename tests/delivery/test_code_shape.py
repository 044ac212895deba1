"""The shape of the code (style.md): no class over 300 lines and no function over 60
in the contract, the plumbing, the operator and the agent, argument parsing aside; and the
agent's state file written from one place.

A class or function counts from its ``def``/``class`` line to its last line, docstring and
nested definitions included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.conftest import ROOT

PACKAGES = (
    ROOT / "contract" / "wcow_contract",
    ROOT / "support" / "wcow_support",
    ROOT / "operator" / "wcow_operator",
    ROOT / "node-agent" / "wcow_agent",
)
CLASS_MAX = 300
FUNCTION_MAX = 60

# Argument parsing reads best as one flat run of add_argument calls: the only exception.
ARGUMENT_PARSING = {
    "operator/wcow_operator/settings.py::_parser": "the operator's flags, each with its "
    "environment variable and default, in one parser",
}


def _definitions(
    nodes: list[ast.stmt], prefix: str
) -> Iterator[tuple[str, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in nodes:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _definitions(node.body, f"{name}.")


def sizes() -> dict[str, tuple[str, int]]:
    """``path::Qualified.name`` -> (kind, lines) for every class and function."""
    found: dict[str, tuple[str, int]] = {}
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = path.relative_to(ROOT).as_posix()
            for name, node in _definitions(tree.body, ""):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                found[f"{where}::{name}"] = (kind, lines)
    return found


def too_long() -> dict[str, str]:
    return {
        name: f"{kind} of {lines} lines"
        for name, (kind, lines) in sizes().items()
        if lines > (CLASS_MAX if kind == "class" else FUNCTION_MAX)
    }


def test_no_class_over_300_lines_and_no_function_over_60() -> None:
    found = too_long()
    unexpected = {n: why for n, why in found.items() if n not in ARGUMENT_PARSING}
    assert not unexpected, f"split these (style.md): {unexpected}"


def test_the_exceptions_are_still_needed() -> None:
    found = too_long()
    stale = sorted(name for name in ARGUMENT_PARSING if name not in found)
    assert not stale, f"no longer over the limit (or gone): remove from the lists: {stale}"


def test_the_agent_writes_its_state_file_in_one_place() -> None:
    """``StateJournal._write`` is the only code that serializes the state (``to_json``):
    every change goes through one of the journal's named steps."""
    writers = []
    for path in sorted((ROOT / "node-agent" / "wcow_agent").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, node in _definitions(tree.body, ""):
            if not isinstance(node, ast.ClassDef) and any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "to_json"
                for call in ast.walk(node)
            ):
                writers.append(f"{path.name}::{name}")
    assert writers == ["state.py::StateJournal._write"]


def test_definitions_include_methods_and_nested_functions() -> None:
    tree = ast.parse("class A:\n    def f(self) -> None:\n        def g() -> None: ...\n")
    assert [name for name, _ in _definitions(tree.body, "")] == ["A", "A.f", "A.f.g"]
