"""Where the handlers go, decided per node (``config/placement.py``), and the pieces it rests
on: containerd's import resolution, the root's import line, the agent's drop-in and its
tables in a template. Pure: no host, files only where imports are resolved."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from wcow_agent.config.drop_in import drop_in_tables, is_agents, render_drop_in
from wcow_agent.config.imports import LoadedFile, load_order, resolve_imports
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.merge_decision import MARKER
from wcow_agent.config.node_paths import DriveMappedPaths, SamePaths, is_absolute
from wcow_agent.config.placement import ContainerdVersion, drop_in_version, place
from wcow_agent.config.root_imports import with_import, without_import
from wcow_agent.config.template import BASE, agent_tables, template_with

PF = r"C:\Program Files\containerd"
CONF_D = PF + r"\conf.d\*.toml"
TABLE: dict[str, Any] = {
    "runtime_type": "io.containerd.runhcs.v1",
    "options": {"SandboxIsolation": 1},
}


def decide(
    tmp_path: Path,
    root: dict[str, Any],
    containerd: str,
    *,
    drop_in: bool = False,
    template: bool = False,
    existing: tuple[str, ...] = (),
) -> tuple[str | None, str, int]:
    paths = DriveMappedPaths(tmp_path)
    folder = paths.node_path(PF)
    layout = NodeLayout(
        "custom",
        folder / "config.toml",
        drop_in_dir=folder / "conf.d" if drop_in else None,
        template=folder / "config-v3.toml.tmpl" if template else None,
    )
    present = {folder / name for name in existing}
    placement = place(
        layout, containerd, (PF + r"\config.toml", root), paths, lambda p: p in present
    )
    return placement.way, placement.reason, placement.version


@pytest.mark.parametrize(
    ("root", "containerd", "drop_in", "expected"),
    [
        # containerd 1.x: always merged (an import's CRI table replaces the root's)
        ({"version": 2, "imports": [CONF_D]}, "1.7.20", True, ("merge", "Containerd1Merge", 2)),
        ({"plugins": {"cri": {}}}, "1.7.20", True, ("merge", "Containerd1Merge", 1)),
        # 2.x: the drop-in in the imported folder, at the root's schema, never 4
        ({"version": 3, "imports": [CONF_D]}, "2.2.7", False, ("drop-in", "DropInImported", 3)),
        ({"version": 4, "imports": [CONF_D]}, "2.3.4", False, ("drop-in", "DropInImported", 3)),
        ({"version": 2, "imports": [CONF_D]}, "2.3.4", False, ("drop-in", "DropInImported", 2)),
        ({"version": 2}, "2.2.7", True, ("drop-in", "DropInImportAdded", 2)),
        ({"version": 3, "imports": []}, "2.0.4", True, ("drop-in", "DropInImportAdded", 3)),
        ({"version": 3}, "2.1.9", False, ("merge", "NoDropInFolder", 3)),
        # schema 1: merged in its names on 2.3+, refused on 2.0-2.2 (its CRI settings lost)
        ({"plugins": {"cri": {}}}, "2.3.4", True, ("merge", "SchemaV1Merge", 1)),
        ({"plugins": {"cri": {}}}, "2.2.7", True, (None, "SchemaV1Lost", 0)),
        ({"plugins": {"cri": {}}}, "2.0.4", True, (None, "SchemaV1Lost", 0)),
        # a version-4 root on 2.2: containerd itself refuses it
        ({"version": 4}, "2.2.7", True, (None, "ConfigVersionTooNew", 0)),
    ],
)
def test_where_the_handlers_go(
    root: dict[str, Any],
    containerd: str,
    drop_in: bool,
    expected: tuple[str | None, str, int],
    tmp_path: Path,
) -> None:
    assert decide(tmp_path, root, containerd, drop_in=drop_in) == expected


def test_a_template_node_uses_the_template_unless_the_render_imports_a_folder(
    tmp_path: Path,
) -> None:
    rendered = {"version": 3}
    assert decide(tmp_path, rendered, "2.2.6", template=True) == (
        "template",
        "RenderedFromTemplate",
        3,
    )
    # k3s reads config.toml.tmpl (version 2's base) when config-v3.toml.tmpl is absent
    legacy = decide(
        tmp_path, {"version": 2}, "2.2.6", template=True, existing=("config.toml.tmpl",)
    )
    assert legacy == ("template", "RenderedFromTemplate", 2)
    imports = {"version": 3, "imports": [PF + r"\config-v3.toml.d\*.toml"]}
    assert decide(tmp_path, imports, "2.3.4", template=True) == (
        "drop-in",
        "RenderedConfigImports",
        3,
    )


def test_a_folder_not_on_this_node_is_no_place_for_a_drop_in(tmp_path: Path) -> None:
    """A Windows import read on a host of the other kind is not reachable: merged."""
    layout = NodeLayout("custom", tmp_path / "config.toml")
    root = {"version": 3, "imports": [CONF_D]}
    placement = place(layout, "2.2.7", (str(layout.config), root), SamePaths(False), Path.exists)
    assert (placement.way, placement.reason) == ("merge", "NoDropInFolder")


def test_the_drop_in_version_check_of_2_3_0_to_2_3_4_and_2_4_0_beta_0() -> None:
    checks = {v: ContainerdVersion.parse(v).checks_drop_in_version() for v in (
        "2.2.7", "2.3.0", "2.3.4", "2.3.5", "2.4.0-beta.0", "2.4.0", "2.4.1"
    )}  # fmt: skip
    assert checks == {
        "2.2.7": False,
        "2.3.0": True,
        "2.3.4": True,
        "2.3.5": False,
        "2.4.0-beta.0": True,
        "2.4.0": True,  # read without its pre-release: taken as the beta (harmless)
        "2.4.1": False,
    }
    for version in checks:
        line = ContainerdVersion.parse(version)
        for root in (2, 3, 4):
            assert drop_in_version(root, line) <= min(root, 3)


def test_imports_resolve_as_containerd_does(tmp_path: Path) -> None:
    """Relative to the importing file, globs sorted by name, breadth-first, each once."""
    paths = DriveMappedPaths(tmp_path)
    folder = paths.node_path(PF)
    (folder / "conf.d").mkdir(parents=True)
    for name, text in {
        "conf.d/90-z.toml": "imports = ['../nested.toml']\n",
        "conf.d/10-a.toml": "",
        "conf.d/notes.txt": "",
        "nested.toml": "imports = ['conf.d/10-a.toml']\n",
    }.items():
        (folder / name).write_text(text, encoding="utf-8")
    assert resolve_imports(PF + r"\config.toml", [r"conf.d\*.toml"], paths) == [
        PF + r"\conf.d\10-a.toml",
        PF + r"\conf.d\90-z.toml",
    ]
    root = LoadedFile(
        PF + r"\config.toml", folder / "config.toml", "", {"imports": [r"conf.d\*.toml"]}
    )
    order = load_order(root, paths, lambda p: p.read_text(encoding="utf-8"))
    assert order.problem is None
    assert [f.written for f in order.files] == [
        PF + r"\config.toml",
        PF + r"\conf.d\10-a.toml",
        PF + r"\conf.d\90-z.toml",
        PF + r"\nested.toml",
    ]
    missing = LoadedFile(root.written, root.local, "", {"imports": [PF + r"\gone.toml"]})
    assert "does not exist" in str(load_order(missing, paths, Path.read_text).problem)
    assert is_absolute(r"C:\x")
    assert not is_absolute(r"\x")
    assert not is_absolute("x")


@pytest.mark.parametrize(
    "text",
    [
        "version = 3\nroot = 'C:\\\\x'\n",
        "version = 3\nimports = []\n\n[plugins]\n",
        "# a comment\nimports = ['C:\\\\other\\\\*.toml'] # theirs\nversion = 2\n",
        "[plugins.x]\nversion = 1\n",
    ],
)
def test_the_root_gains_the_import_and_loses_exactly_it(text: str) -> None:
    added = with_import(text, CONF_D)
    document = tomllib.loads(added)
    assert document["imports"][-1] == CONF_D
    assert with_import(added, CONF_D) == added
    line_added = "imports" not in tomllib.loads(text)
    assert without_import(added, CONF_D, line_added) == text


def test_the_drop_in_is_the_agents_file() -> None:
    text = render_drop_in({"hv": TABLE}, 2)
    assert text is not None
    assert is_agents(text)
    assert tomllib.loads(text)["version"] == 2
    assert drop_in_tables(text) == {"hv": TABLE}
    assert render_drop_in({}, 3) is None
    assert not is_agents("version = 3\n")


def test_the_template_gets_only_new_tables_and_gives_back_what_it_found() -> None:
    created = template_with(None, {"hv": TABLE}, 3)
    assert created is not None
    assert created.startswith(BASE + "\n")
    assert created.count(MARKER) == 1
    assert agent_tables(created) == {"hv": TABLE}
    assert template_with(created, {}, 3, created=True) is None
    theirs = BASE + "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.x]\n"
    ours = template_with(theirs, {"hv": TABLE, "hv2": TABLE}, 3)
    assert ours is not None
    assert ours.startswith(theirs)
    assert template_with(ours, {}, 3) == theirs
