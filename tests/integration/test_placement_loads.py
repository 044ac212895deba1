"""The agent's placement on each distribution's real files, judged by containerd's own
loader (tools/containerd-decode) on each line that applies.

For each file of tests/fixtures/distributions, laid out where its distribution keeps it,
the agent places a Hyper-V and a process handler as it would on that node (its drop-in,
RKE2's template, or merged into config.toml), and the line's loader must find both with
every option decoded as rendered, every other table and setting as before; taking them
out again must give back the file set the agent found, byte for byte. The lines run here
are 1.7, 2.2 and 2.3 (containerd 2.0 and 2.1 load configuration as 2.2 does, and a node of
1.6 is judged by the 1.7 loader, which reads its schema the same way).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, profile_document
from tests.containerd_lines import assert_handler, effective_config, loads, needs_go
from tests.placement_node import PlacedNode
from tests.template_render import render
from wcow_agent.config.effective import defined_handlers
from wcow_agent.config.layout import DROP_IN_NAME
from wcow_agent.config.merge_decision import MARKER
from wcow_agent.config.template import BASE
from wcow_contract.errors import parse_profile
from wcow_contract.wire.runtime_table import runtime_table

pytestmark = needs_go

DIST = ROOT / "tests" / "fixtures" / "distributions"
PROGRAM_FILES = r"C:\Program Files\containerd"
RKE2_ETC = r"C:\var\lib\rancher\rke2\agent\etc\containerd"
TABLES: dict[str, dict[str, Any]] = {
    "wcow-hyperv": runtime_table(
        parse_profile(profile_document("wcow-hyperv", vm={"processorCount": 2, "memoryMB": 2048}))
    ),
    "wcow-process": runtime_table(
        parse_profile(profile_document("wcow-process", isolation="Process"))
    ),
}


def kubeadm(tmp_path: Path, fixture: str, containerd: str, drop_in: bool = True) -> PlacedNode:
    return PlacedNode.make(
        tmp_path,
        (DIST / fixture).read_text(encoding="utf-8"),
        containerd,
        drop_in_dir=PROGRAM_FILES + r"\conf.d" if drop_in else None,
    )


def openshift(tmp_path: Path, fixture: str, containerd: str) -> PlacedNode:
    return PlacedNode.make(
        tmp_path,
        (DIST / fixture).read_text(encoding="utf-8"),
        containerd,
        config=r"C:\k\containerd\containerd_conf.toml",
    )


def rke2(tmp_path: Path, fixture: str, containerd: str) -> PlacedNode:
    return PlacedNode.make(
        tmp_path,
        (DIST / fixture).read_text(encoding="utf-8"),
        containerd,
        config=RKE2_ETC + r"\config.toml",
        template=RKE2_ETC + r"\config-v3.toml.tmpl",
    )


# (fixture, how the node is laid out, containerd on the node, the line that loads it,
# where the handlers go, the schema of the agent's tables)
CASES = {
    "kubeadm-1.7": ("swt-containerd-1.7-config.toml", kubeadm, "1.7.34", "1.7", "merge", 2),
    "kubeadm-2.2": ("swt-containerd-2.2-config.toml", kubeadm, "2.2.7", "2.2", "drop-in", 3),
    "kubeadm-2.2-upgraded-to-2.3": (
        "swt-containerd-2.2-config.toml", kubeadm, "2.3.4", "2.3", "drop-in", 3
    ),
    # a 1.7 node's version-2 file kept through an upgrade: a version-2 drop-in, which
    # 2.2 merges correctly and 2.3.0-2.3.4's drop-in version check lets through
    "kubeadm-1.7-upgraded-to-2.2": (
        "swt-containerd-1.7-config.toml", kubeadm, "2.2.7", "2.2", "drop-in", 2
    ),
    "kubeadm-1.7-upgraded-to-2.3.4": (
        "swt-containerd-1.7-config.toml", kubeadm, "2.3.4", "2.3", "drop-in", 2
    ),
    "containerd-2.3-default": (
        "containerd-2.3-windows-default.toml", kubeadm, "2.3.4", "2.3", "drop-in", 3
    ),
    "aks-ws2022": ("aks-ws2022-containerd-1.7-config.toml", kubeadm, "1.7.20", "1.7", "merge", 1),
    "aks-ws2025": ("aks-ws2025-containerd-2.0-config.toml", kubeadm, "2.0.4", "2.2", "drop-in", 3),
    "openshift": ("wmco-containerd_conf.toml", openshift, "1.7.27", "1.7", "merge", 2),
    "gke-kube-up": ("gke-kubeup-containerd-config.toml", kubeadm, "1.6.2", "1.7", "merge", 1),
    "gke-kube-up-on-2.3": (
        "gke-kubeup-containerd-config.toml", kubeadm, "2.3.4", "2.3", "merge", 1
    ),
    "rke2-main": ("rke2-windows-config.toml", rke2, "2.3.4", "2.3", "drop-in", 3),
    "rke2-1.35": ("rke2-windows-config.toml", rke2, "2.2.6", "2.2", "drop-in", 3),
}  # fmt: skip


def decoded(table: dict[str, Any]) -> dict[str, Any]:
    """The table as hcsshim's Options hold it once decoded: zero values are not set
    (tools/containerd-decode leaves them out), the process handler's SandboxIsolation 0."""
    options = {k: v for k, v in table["options"].items() if v not in (0, "")}
    return {**table, "options": options}


def unchanged(
    before: dict[str, Any], after: dict[str, Any], own_tables: set[str], snapshotter: str = ""
) -> None:
    """Every setting and handler the node's files set means what it meant. ``snapshotter``:
    the one a schema-1 file names, which 2.3 takes only once the file defines handlers (its
    images plugin's migration: test_containerd_effective.py); before, the line's built-in
    default (Linux's here, `windows` on a Windows node: the same as the file's)."""
    for key in ("sandbox_image", "default_runtime_name", "version"):
        assert after[key] == before[key], key
    assert after["snapshotter"] in (before["snapshotter"], snapshotter)
    for name in own_tables:
        assert after["runtimes"][name] == before["runtimes"][name], name


@pytest.mark.parametrize("case", CASES)
def test_each_distribution_takes_the_handlers_intact_and_gives_its_files_back(
    case: str, tmp_path: Path
) -> None:
    fixture, make, containerd, line, way, schema = CASES[case]
    node = make(tmp_path, fixture, containerd)
    found = node.snapshot()
    before = loads(line, node.loadable())
    document = tomllib.loads((DIST / fixture).read_text("utf-8"))
    own_tables = set(defined_handlers(document))
    v1 = document.get("plugins", {}).get("cri", {}).get("containerd", {})

    placed = node.apply(TABLES)

    assert placed.placement.way == way, placed.placement
    assert placed.placement.version == schema
    assert placed.result.conflicts == {}
    after = loads(line, node.loadable())
    for name, table in TABLES.items():
        assert_handler(after, name, decoded(table))
    unchanged(before, after, own_tables & set(before["runtimes"]), v1.get("snapshotter", ""))
    if way == "drop-in":
        ours = tomllib.loads(Path(str(placed.placement.target)).read_text("utf-8"))
        assert ours["version"] == schema
        assert after["imports"][-1].endswith(DROP_IN_NAME)

    node.uninstall()
    assert node.snapshot() == found


@pytest.mark.parametrize("line", ["2.2", "2.3"])
def test_a_handler_placed_in_a_drop_in_by_hand_is_a_conflict_then_adopted_cleanly(
    line: str, tmp_path: Path
) -> None:
    """containerd 2.x merges a drop-in's table over one of the same name key by key: the
    agent neither writes over the team's table nor merges into it. Adopted, the table is
    taken out of its file, so containerd runs exactly the agent's (no key of the team's
    left over), and it is written back, byte for byte, when the agent lets go."""
    node = kubeadm(tmp_path, "swt-containerd-2.2-config.toml", {"2.2": "2.2.7"}.get(line, "2.3.4"))
    conf_d = node.paths.node_path(PROGRAM_FILES + r"\conf.d")
    conf_d.mkdir()
    by_hand = conf_d / "50-team.toml"
    team = (
        "version = 3\n\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wcow-hyperv]\n"
        "  runtime_type = 'io.containerd.runhcs.v1'\n"
        "  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wcow-hyperv.options]\n"
        "    SandboxIsolation = 1\n"
        "    VmMemorySizeInMb = 4096\n"
        "    Debug = true\n"
    )
    by_hand.write_text(team, encoding="utf-8")
    found = node.snapshot()

    placed = node.apply(TABLES)
    assert set(placed.result.conflicts) == {"wcow-hyperv"}
    assert "50-team.toml" in placed.result.conflicts["wcow-hyperv"]
    loaded = loads(line, node.loadable())
    assert loaded["runtimes"]["wcow-hyperv"]["options"]["VmMemorySizeInMb"] == 4096
    assert_handler(loaded, "wcow-process", decoded(TABLES["wcow-process"]))
    assert by_hand.read_text(encoding="utf-8") == team

    node.apply(TABLES, adopt={"wcow-hyperv"})
    loaded = loads(line, node.loadable())
    assert_handler(loaded, "wcow-hyperv", decoded(TABLES["wcow-hyperv"]))
    assert "Debug" not in loaded["runtimes"]["wcow-hyperv"]["options"]

    node.uninstall()
    assert node.snapshot() == found


def test_the_rke2_template_renders_the_handlers_and_rke2s_own_config(tmp_path: Path) -> None:
    """RKE2 before the rendered config imported a drop-in folder: the agent creates
    config-v3.toml.tmpl as the base plus its tables only; rendered by Go's text/template as
    k3s renders it, containerd 2.2 and 2.3 (RKE2 1.35 and 1.36) load the handlers intact and
    everything of RKE2's as before; the template goes again with the last handler."""
    base = render(None)
    rendered = base.replace(
        next(row for row in base.splitlines() if row.startswith("imports = ")) + "\n", ""
    )  # the base of rke2 1.34 and 1.35.0 imports nothing (k3s b51167a9 came after)
    node = rke2(tmp_path, "rke2-windows-config.toml", "2.2.6")
    node.layout.config.write_text(rendered, encoding="utf-8")
    found = node.snapshot()

    placed = node.apply(TABLES)

    assert (placed.placement.way, placed.placement.version) == ("template", 3)
    template = Path(str(placed.placement.target))
    assert template.name == "config-v3.toml.tmpl"
    text = template.read_text(encoding="utf-8")
    assert text.startswith(BASE + "\n")
    assert text.count(MARKER) == len(TABLES)
    assert node.layout.config.read_text(encoding="utf-8") == rendered, "config.toml not edited"
    with_ours = render(text)
    for line in ("2.2", "2.3"):
        before = loads(line, node.loadable(base))
        after = loads(line, node.loadable(with_ours))
        for name, table in TABLES.items():
            assert_handler(after, name, decoded(table))
        unchanged(before, after, {"runc", "runhcs-wcow-process"})

    node.uninstall()
    assert node.snapshot() == found


def test_a_users_rke2_template_keeps_what_they_wrote(tmp_path: Path) -> None:
    node = rke2(tmp_path, "rke2-windows-config.toml", "2.2.6")
    rendered = node.layout.config.read_text(encoding="utf-8")
    node.layout.config.write_text(
        "".join(r for r in rendered.splitlines(True) if not r.startswith("imports")), "utf-8"
    )
    template = node.paths.node_path(RKE2_ETC + r"\config-v3.toml.tmpl")
    theirs = (
        BASE + "\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'team']\n"
        '  runtime_type = "io.containerd.runhcs.v1"\n'
    )
    template.write_text(theirs, encoding="utf-8")

    placed = node.apply(TABLES)

    assert placed.placement.way == "template"
    text = template.read_text(encoding="utf-8")
    assert text.startswith(theirs)
    after = loads("2.3", node.loadable(render(text)))
    assert after["runtimes"]["team"]["runtime_type"] == "io.containerd.runhcs.v1"
    for name, table in TABLES.items():
        assert_handler(after, name, decoded(table))

    node.uninstall()
    assert template.read_text(encoding="utf-8") == theirs


def test_a_v3_drop_in_under_a_v2_root_would_trip_2_3_4s_version_check(tmp_path: Path) -> None:
    """What the agent avoids (its drop-in takes the root's schema): the same tables in a
    version-3 drop-in under the 1.7 node's version-2 root are refused by 2.3.4."""
    node = kubeadm(tmp_path, "swt-containerd-1.7-config.toml", "2.3.4")
    placed = node.apply(TABLES)
    drop_in = Path(str(placed.placement.target))
    assert tomllib.loads(drop_in.read_text("utf-8"))["version"] == 2
    assert loads("2.3", node.loadable())["error"] is None

    from wcow_agent.config.drop_in import render_drop_in

    drop_in.write_text(render_drop_in(TABLES, 3) or "", encoding="utf-8")
    refused = effective_config("2.3", node.loadable())
    assert refused["error"] == "drop-in config version 3 higher than root config version 2"
