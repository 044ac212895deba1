"""Runtime dependencies: each one declared is imported by the code, each third-party module the
code imports is declared, and CONTRIBUTING.md says what each one is for."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

CONTRACT = ROOT / "contract" / "wcow_contract"
SUPPORT = ROOT / "support" / "wcow_support"
PACKAGES = (
    CONTRACT,
    SUPPORT,
    ROOT / "operator" / "wcow_operator",
    ROOT / "node-agent" / "wcow_agent",
)
FIRST_PARTY = {"wcow_contract", "wcow_support", "wcow_operator", "wcow_agent"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_name(requirement) for requirement in project["dependencies"]}


def imported_modules(packages: tuple[Path, ...] = PACKAGES) -> set[str]:
    modules: set[str] = set()
    for package in packages:
        for path in package.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    return modules - FIRST_PARTY - set(sys.stdlib_module_names) - {"__future__"}


def imported_distributions(packages: tuple[Path, ...] = PACKAGES) -> set[str]:
    providers = importlib.metadata.packages_distributions()
    found = set()
    for module in imported_modules(packages):
        assert module in providers, f"{module} is imported but no installed distribution has it"
        found.update(_name(dist) for dist in providers[module])
    return found


def test_every_declared_dependency_is_imported() -> None:
    unused = declared() - imported_distributions()
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"


def test_every_imported_third_party_module_is_declared() -> None:
    undeclared = imported_distributions() - declared()
    assert not undeclared, f"imported but not declared in pyproject.toml: {sorted(undeclared)}"


def test_contributing_says_what_each_dependency_is_for() -> None:
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = guide.split("\n## Dependencies\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|$", section, flags=re.MULTILINE)
    listed = {_name(name): purpose for name, purpose in rows}
    assert set(listed) == declared()
    assert all(len(purpose.split()) >= 4 for purpose in listed.values()), listed


def test_the_contract_needs_pydantic_and_the_standard_library_only() -> None:
    """Both binaries install the contract: it must not pull either side's dependencies."""
    assert imported_modules((CONTRACT,)) == {"pydantic"}


def test_the_plumbing_needs_the_standard_library_only() -> None:
    """Retry, health and supervisor serve both binaries and the tests: no dependency at all."""
    assert imported_modules((SUPPORT,)) == set()
