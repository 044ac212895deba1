"""What each containerd line makes of a root config.toml and its imports, by its own loader.

The node agent writes runtime handlers into config.toml, or into a drop-in of its own that
the root imports, depending on the containerd line and the distribution. These tests pin the
loading facts it relies on, each on the lines where it holds, with real config files of each
distribution (tests/fixtures/distributions) and drop-ins rendered by the project
(``render_containerd_toml``). containerd's code runs here on Linux, so its built-in defaults
(the default runtime, snapshotter) are Linux's; the tests assert on what the files set, and
on built-in defaults only by comparison with an empty file. Windows import paths in the
fixtures (relative paths on Linux, matching nothing) are pointed at a folder of the test.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, profile_document
from tests.containerd_lines import LINES, assert_handler, effective_config, loads, needs_go
from wcow_agent.config.sandbox_image import with_pause_image
from wcow_contract.errors import parse_profile
from wcow_contract.wire.runtime_table import runtime_table
from wcow_operator.render.containerd import render_containerd_toml

pytestmark = needs_go

DIST = ROOT / "tests" / "fixtures" / "distributions"
# `containerd config default` on Windows from 2.2 on: the path is expanded when written.
DEFAULT_CONF_D = "C:\\Program Files\\containerd\\conf.d\\*.toml"
RKE2_CONF_D = "C:\\var\\lib\\rancher\\rke2\\agent\\etc\\containerd\\config-v3.toml.d\\*.toml"
ROOT_PAUSE = "example.com/pause:root"
DROP_IN = "wcow-runtime.toml"

HANDLER = "wcow-hyperv"
# The table the project renders for a Hyper-V profile with a 2-processor, 2 GB VM.
TABLE: dict[str, Any] = runtime_table(
    parse_profile(profile_document(HANDLER, vm={"processorCount": 2, "memoryMB": 2048}))
)


def node(tmp_path: Path, fixture: str, listed: str | None = None, pause: int = 0) -> Path:
    """``fixture`` as tmp_path/config.toml, importing tmp_path/conf.d/*.toml: its import
    line (which must be ``[listed]``) replaced, or one added. ``pause``: the file's schema
    version, to set its pause image to ROOT_PAUSE (with the agent's own edit)."""
    text = (DIST / fixture).read_text(encoding="utf-8")
    assert tomllib.loads(text).get("imports", []) == ([listed] if listed else [])
    if pause:
        text = with_pause_image(text, pause, ROOT_PAUSE)
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    line = f"imports = ['{conf_d}/*.toml']"
    kept = [row for row in text.splitlines() if not row.startswith("imports = ")]
    root = tmp_path / "config.toml"
    root.write_text("\n".join([line, *kept]) + "\n", encoding="utf-8")
    return root


def drop_in(root: Path, tables: dict[str, Any], version: int | None, name: str = DROP_IN) -> Path:
    """A drop-in in the root's conf.d holding these handler tables in the names of schema
    ``version`` (None: version 3's names without a `version` line)."""
    text = render_containerd_toml(tables, version or 3)
    if version is None:
        text = "".join(row for row in text.splitlines(True) if not row.startswith("version"))
    path = root.parent / "conf.d" / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "fixture"),
    [
        ("2.2", "containerd-2.2-windows-default.toml"),
        ("2.3", "containerd-2.2-windows-default.toml"),  # a 2.2 node upgraded to 2.3
        ("2.3", "containerd-2.3-windows-default.toml"),
    ],
)
def test_a_drop_in_in_conf_d_adds_handlers_and_merges_into_the_roots(
    line: str, fixture: str, tmp_path: Path
) -> None:
    """2.2+'s default config imports conf.d; a version-3 drop-in there adds a handler, and
    its keys merge into a handler of the same name in the root: its option keys are added
    to the root's, a list replaces the root's, other root handlers and settings stay."""
    root = node(tmp_path, fixture, DEFAULT_CONF_D)
    ours = drop_in(
        root,
        {
            HANDLER: TABLE,
            "runhcs-wcow-hypervisor": {
                "runtime_type": "io.containerd.runhcs.v1",
                "pod_annotations": ["io.microsoft.wcow.*"],
                "options": {"VmProcessorCount": 4},
            },
        },
        3,
    )
    loaded = loads(line, root)
    assert loaded["imports"] == [str(root), str(ours)]
    assert_handler(loaded, HANDLER, TABLE)
    cri = tomllib.loads((DIST / fixture).read_text(encoding="utf-8"))["plugins"]
    hypervisor = cri["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"][
        "runhcs-wcow-hypervisor"
    ]
    assert_handler(
        loaded,
        "runhcs-wcow-hypervisor",
        {
            "runtime_type": "io.containerd.runhcs.v1",
            "pod_annotations": ["io.microsoft.wcow.*"],
            "container_annotations": hypervisor["container_annotations"],
            "options": {**hypervisor["options"], "VmProcessorCount": 4},
        },
    )
    assert loaded["runtimes"]["runhcs-wcow-process"]["runtime_type"] == "io.containerd.runhcs.v1"
    assert loaded["default_runtime_name"] == "runhcs-wcow-process"
    assert loaded["snapshotter"] == "windows"
    pinned = cri["io.containerd.cri.v1.images"]["pinned_images"]
    assert loaded["sandbox_image"] == pinned["sandbox"]


def test_on_1_7_an_imported_cri_table_replaces_the_roots_whole_cri_section(
    tmp_path: Path,
) -> None:
    """containerd 1.7 merges imports plugin by plugin: a drop-in that defines one handler
    takes the place of everything the root set for the CRI plugin (its handlers, its pause
    image). So on 1.7 the agent edits config.toml and writes no drop-in."""
    root = node(tmp_path, "containerd-1.7-windows-default.toml", pause=2)
    alone = loads("1.7", root)
    assert alone["sandbox_image"] == ROOT_PAUSE
    assert {"runhcs-wcow-process", "runhcs-wcow-hypervisor"} <= set(alone["runtimes"])

    ours = drop_in(root, {HANDLER: TABLE}, 2)
    loaded = loads("1.7", root)
    assert loaded["imports"] == [str(root), str(ours)]
    assert_handler(loaded, HANDLER, TABLE)
    assert set(loaded["runtimes"]) == {HANDLER}
    assert loaded["sandbox_image"] != ROOT_PAUSE


@pytest.mark.parametrize("line", LINES)
def test_handlers_a_file_defines_replace_or_join_the_built_in_ones(
    line: str, tmp_path: Path
) -> None:
    """On 1.7 a file that defines any handler replaces the built-in handlers (on Windows
    runhcs-wcow-hypervisor disappears); on 2.x the built-in ones stay beside the file's."""
    empty = tmp_path / "empty.toml"
    empty.write_text("version = 2\n", encoding="utf-8")
    built_in = set(loads(line, empty)["runtimes"])
    assert built_in, "no built-in handlers to compare with"

    config = tmp_path / "config.toml"
    config.write_text(render_containerd_toml({HANDLER: TABLE}, 2), encoding="utf-8")
    loaded = loads(line, config)
    assert_handler(loaded, HANDLER, TABLE)
    expected = {HANDLER} if line == "1.7" else built_in | {HANDLER}
    assert set(loaded["runtimes"]) == expected


def v1_settings(fixture: str) -> dict[str, Any]:
    """The CRI settings a schema-1 file sets, under `plugins.cri`. The snapshotter only
    where the file defines handlers: 2.x does not migrate it otherwise (see
    test_a_snapshotter_is_migrated_only_beside_handlers)."""
    cri = tomllib.loads((DIST / fixture).read_text(encoding="utf-8"))["plugins"]["cri"]
    containerd = cri["containerd"]
    return {
        "sandbox_image": cri["sandbox_image"],
        "snapshotter": containerd["snapshotter"] if "runtimes" in containerd else None,
        "runtimes": containerd.get("runtimes", {}),
        "default_runtime_name": containerd.get("default_runtime_name"),
    }


@pytest.mark.parametrize(
    ("line", "version", "kept"), [("1.7", 1, True), ("2.2", 3, False), ("2.3", 4, True)]
)
@pytest.mark.parametrize(
    "fixture", ["aks-ws2022-containerd-1.7-config.toml", "gke-kubeup-containerd-config.toml"]
)
def test_a_schema_1_file(line: str, version: int, kept: bool, fixture: str) -> None:
    """A schema-1 file (no `version`, `[plugins.cri]`, as AKS WS2022 and kube-up/GKE write)
    loads natively on 1.7 and is migrated on 2.3 with every CRI setting; 2.0-2.2 load it
    without a word but drop all of them (handlers, pause image, snapshotter): on 2.2 the
    agent must not rely on such a file."""
    settings = v1_settings(fixture)
    loaded = loads(line, DIST / fixture)
    assert loaded["version"] == version
    same = {"sandbox_image": loaded["sandbox_image"] == settings["sandbox_image"]}
    if settings["snapshotter"]:
        same["snapshotter"] = loaded["snapshotter"] == settings["snapshotter"]
    if settings["default_runtime_name"]:
        same["default_runtime_name"] = (
            loaded["default_runtime_name"] == settings["default_runtime_name"]
        )
    for name, table in settings["runtimes"].items():
        same[name] = name in loaded["runtimes"]
        if kept:
            assert loaded["runtimes"][name]["options"] == table["options"]
            assert loaded["runtimes"][name]["undecoded_options"] == []
    assert same == dict.fromkeys(same, kept)


def test_1_7_refuses_a_version_2_drop_in_under_a_schema_1_root(tmp_path: Path) -> None:
    """The merged config takes the drop-in's version 2, under which the root's schema-1
    plugin names (`cri`, `scheduler`, ...) are invalid; which one is named depends on map
    order."""
    root = node(tmp_path, "aks-ws2022-containerd-1.7-config.toml")
    drop_in(root, {HANDLER: TABLE}, 2)
    error = effective_config("1.7", root)["error"]
    named = re.search(r'invalid plugin key URI "([^"]+)"', error)
    assert named, error
    assert named[1] in tomllib.loads(root.read_text(encoding="utf-8"))["plugins"]


@pytest.mark.parametrize(
    ("line", "root_version", "drop_in_version", "outcome"),
    [
        # a version-2 root (a node upgraded from 1.7 keeps its file)
        ("2.2", 2, 2, "both"),
        ("2.3", 2, 2, "both"),
        ("2.2", 2, 3, "root lost"),  # the merged version is 3: the root is never migrated
        ("2.3", 2, 3, "refused"),  # 2.3.0-2.3.4: drop-in version higher than the root's
        ("2.2", 2, None, "root handlers lost"),  # the drop-in's table pre-empts migration
        ("2.3", 2, None, "both"),
        # a version-3 root
        ("2.2", 3, 2, "drop-in ignored"),
        ("2.3", 3, 2, "both"),
    ],
)
def test_a_drop_in_of_another_schema_version(
    line: str,
    root_version: int,
    drop_in_version: int | None,
    outcome: str,
    tmp_path: Path,
) -> None:
    """2.0-2.2 merge files of different versions wrongly and silently: only a drop-in of
    the root's schema is safe there. 2.3 migrates each file before merging, but 2.3.0-2.3.4
    refuse a drop-in whose version is higher than the root's."""
    if root_version == 2:
        root = node(tmp_path, "containerd-1.7-windows-default.toml", pause=2)
    else:
        root = node(tmp_path, "containerd-2.2-windows-default.toml", DEFAULT_CONF_D, pause=3)
    drop_in(root, {HANDLER: TABLE}, drop_in_version)
    loaded = effective_config(line, root)
    if outcome == "refused":
        assert loaded["error"] == (
            f"drop-in config version {drop_in_version} higher than root config version "
            f"{root_version}"
        )
        return
    assert loaded["error"] is None, loaded["error"]
    seen = {
        "drop-in handler": HANDLER in loaded["runtimes"],
        "root handlers": "runhcs-wcow-hypervisor" in loaded["runtimes"],
        "root pause image": loaded["sandbox_image"] == ROOT_PAUSE,
    }
    expected = {
        "both": {"drop-in handler": True, "root handlers": True, "root pause image": True},
        "root lost": {"drop-in handler": True, "root handlers": False, "root pause image": False},
        "root handlers lost": {
            "drop-in handler": True,
            "root handlers": False,
            "root pause image": True,
        },
        "drop-in ignored": {
            "drop-in handler": False,
            "root handlers": True,
            "root pause image": True,
        },
    }
    assert seen == expected[outcome]
    if seen["drop-in handler"]:
        assert_handler(loaded, HANDLER, TABLE)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("1.7", "unsupported config version `4`"),
        ("2.2", "expected containerd config version equal to or less than `3`, got `4`"),
        ("2.3", None),
    ],
)
def test_a_version_4_root(line: str, error: str | None, tmp_path: Path) -> None:
    """2.3's default config is version 4, which 2.2 and 1.7 refuse: the agent never writes
    version 4."""
    root = node(tmp_path, "containerd-2.3-windows-default.toml", DEFAULT_CONF_D)
    loaded = effective_config(line, root)
    if error is not None:
        assert error in loaded["error"]
        assert loaded["version"] is None
        assert loaded["runtimes"] == {}
        return
    assert loaded["error"] is None
    assert loaded["version"] == 4
    runtimes = tomllib.loads(root.read_text(encoding="utf-8"))["plugins"][
        "io.containerd.cri.v1.runtime"
    ]["containerd"]["runtimes"]
    for name, table in runtimes.items():
        assert loaded["runtimes"][name]["options"] == table.get("options"), name


@pytest.mark.parametrize("line", ["2.2", "2.3"])
def test_rke2s_rendered_config_takes_a_drop_in(line: str, tmp_path: Path) -> None:
    """RKE2 renders a version-3 config.toml importing config-v3.toml.d (rke2 1.35 runs
    containerd 2.2, 1.36 and main 2.3): a version-3 drop-in there adds a handler and keeps
    RKE2's handlers, pause image, snapshotter and default handler."""
    root = node(tmp_path, "rke2-windows-config.toml", RKE2_CONF_D)
    ours = drop_in(root, {HANDLER: TABLE}, 3)
    loaded = loads(line, root)
    assert loaded["imports"] == [str(root), str(ours)]
    assert_handler(loaded, HANDLER, TABLE)
    assert loaded["runtimes"]["runhcs-wcow-process"]["runtime_type"] == "io.containerd.runhcs.v1"
    assert loaded["runtimes"]["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert loaded["sandbox_image"] == "index.docker.io/rancher/mirrored-pause:3.10.2"
    assert loaded["snapshotter"] == "windows"
    assert loaded["default_runtime_name"] == "runhcs-wcow-process"


@pytest.mark.parametrize("line", LINES)
def test_later_drop_ins_win_and_a_missing_import_is_fatal(line: str, tmp_path: Path) -> None:
    """Files matched by a pattern are merged in name order, the last one winning; an import
    that names a missing file stops containerd (a pattern that matches nothing does not)."""
    if line == "1.7":
        version, root = 2, node(tmp_path, "containerd-1.7-windows-default.toml")
    else:
        version, root = 3, node(tmp_path, "containerd-2.2-windows-default.toml", DEFAULT_CONF_D)
    assert loads(line, root)["imports"] == [str(root)]
    early = {**TABLE, "options": {**TABLE["options"], "VmProcessorCount": 4}}
    first = drop_in(root, {HANDLER: early}, version, "90-z.toml")
    second = drop_in(root, {HANDLER: TABLE}, version, "10-a.toml")
    loaded = loads(line, root)
    assert loaded["imports"] == [str(root), str(second), str(first)]
    assert loaded["runtimes"][HANDLER]["options"]["VmProcessorCount"] == 4

    missing = root.parent / "missing.toml"
    root.write_text(f"version = {version}\nimports = ['{missing}']\n", encoding="utf-8")
    assert str(missing) in effective_config(line, root)["error"]


@pytest.mark.parametrize(("line", "migrated"), [("1.7", True), ("2.2", False), ("2.3", False)])
def test_a_snapshotter_is_migrated_only_beside_handlers(
    line: str, migrated: bool, tmp_path: Path
) -> None:
    """2.x moves a version-1 or 2 file's `containerd.snapshotter` to the images plugin only
    when that `containerd` table also defines runtimes (the images plugin's migration stops
    early otherwise): the effective snapshotter, which tells a block-CIM node, must be read
    from containerd's own loading, not from the file."""
    table = '[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "blockcim"\n'
    handler = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.x]\n'
    config = tmp_path / "config.toml"
    config.write_text(f"version = 2\n{table}", encoding="utf-8")
    assert (loads(line, config)["snapshotter"] == "blockcim") is migrated
    config.write_text(f"version = 2\n{table}{handler}", encoding="utf-8")
    assert loads(line, config)["snapshotter"] == "blockcim"
