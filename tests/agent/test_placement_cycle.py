"""Where the handlers go, in whole cycles on a faked Windows node laid out as its
distribution lays it out (the node's drives mapped to folders: ``DriveMappedPaths``): the
agent's own drop-in, the root's import of it, moves between places, a handler placed in a
drop-in by hand, ``--restart-mode none``, and files the node rewrites behind the agent."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import hyperv, make_plan, process
from tests.agent.fakes import CONFIGS, FakeNode
from wcow_agent.config.layout import DROP_IN_NAME, NodeLayout
from wcow_agent.config.merge_decision import MARKER
from wcow_agent.config.node_paths import DriveMappedPaths
from wcow_agent.config.state import load_state
from wcow_agent.simulator.faults import SimulatedCrash

DIST = Path(__file__).resolve().parent.parent / "fixtures" / "distributions"
PROGRAM_FILES = r"C:\Program Files\containerd"
V3 = ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes")


def kubeadm_node(
    tmp_path: Path,
    text: str,
    version: str,
    *,
    drop_in_dir: bool = True,
    restart_mode: str = "service",
) -> FakeNode:
    """A kubeadm node: config.toml in %ProgramFiles%\\containerd, drop-ins in its conf.d."""
    paths = DriveMappedPaths(tmp_path)
    folder = paths.node_path(PROGRAM_FILES)
    folder.mkdir(parents=True)
    layout = NodeLayout(
        "kubeadm",
        folder / "config.toml",
        drop_in_dir=folder / "conf.d" if drop_in_dir else None,
        restart_mode="none" if restart_mode == "none" else "service",
    )
    return FakeNode(
        folder, config_text=text, containerd_version=version, paths=paths, layout=layout
    )


def default_22() -> str:
    return (DIST / "containerd-2.2-windows-default.toml").read_text(encoding="utf-8")


def drop_in(node: FakeNode) -> Path:
    return node.config.parent / "conf.d" / DROP_IN_NAME


def states(report: Any) -> dict[str, tuple[str, str]]:
    return {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()}


def runtimes_in(text: str) -> dict[str, Any]:
    node: Any = tomllib.loads(text)
    for name in V3:
        node = node.get(name, {})
    return dict(node)


def test_a_2_2_default_config_gets_the_agents_drop_in_and_loses_it_again(
    tmp_path: Path,
) -> None:
    """containerd 2.2's default config imports conf.d: the handlers go into the agent's own
    drop-in there, config.toml is not touched, one restart; uninstall deletes the drop-in
    and the folder the agent created."""
    original = default_22()
    node = kubeadm_node(tmp_path, original, "2.2.7")
    plan = make_plan(hyperv(), process())

    report = node.agent().reconcile(plan)

    assert report.result == "applied"
    assert states(report) == {"hv": ("Ready", "CanaryPassed"), "proc": ("Ready", "CanaryPassed")}
    assert report.restarts == ["apply"]
    assert node.disk_text() == original
    text = drop_in(node).read_text(encoding="utf-8")
    assert text.startswith("# managed by wcow-agent")
    assert tomllib.loads(text)["version"] == 3
    assert runtimes_in(text) == {h: e.runtime for h, e in plan.handlers.items()}
    assert {"hv", "proc", "runhcs-wcow-hypervisor"} <= set(node.loaded_runtimes())
    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("drop-in", "DropInImported")
    record = load_state(node.root / "config.toml.wcow-state.json")[0].placement
    assert record is not None
    assert record.target == str(drop_in(node))

    again = node.agent().reconcile(plan)
    assert (again.result, again.restarts, again.wrote) == ("unchanged", [], False)

    node.agent().uninstall()
    assert not drop_in(node).parent.exists(), "the agent created conf.d: it goes, empty"
    assert node.disk_text() == original
    assert set(node.loaded_runtimes()) == {"runhcs-wcow-process", "runhcs-wcow-hypervisor"}


def test_a_root_without_the_import_gains_it_and_is_given_back_byte_for_byte(
    tmp_path: Path,
) -> None:
    """containerd 2.0's default imports nothing: with a drop-in folder in the layout the
    root gains exactly the import of it, and loses it again with the last handler."""
    original = (CONFIGS / "v3-containerd-2.0-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "2.0.4")

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "applied"
    assert states(report) == {"hv": ("Ready", "CanaryPassed")}
    root = tomllib.loads(node.disk_text() or "")
    assert root["imports"] == [PROGRAM_FILES + r"\conf.d\*.toml"]
    assert {k: v for k, v in root.items() if k != "imports"} == {
        k: v for k, v in tomllib.loads(original).items() if k != "imports"
    }
    assert drop_in(node).exists()

    removed = node.agent().reconcile(make_plan())
    assert removed.result == "applied"
    assert node.disk_text() == original
    assert not drop_in(node).exists()
    assert not (node.root / "config.toml.wcow-original").exists()


def test_without_a_drop_in_folder_the_handlers_are_merged(tmp_path: Path) -> None:
    original = (CONFIGS / "v3-containerd-2.0-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "2.0.4", drop_in_dir=False)

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("merge", "NoDropInFolder")
    assert "hv" in runtimes_in(node.disk_text() or "")
    assert MARKER in (node.disk_text() or "")


def test_a_handler_placed_in_a_drop_in_by_hand_is_a_conflict_or_adopted(
    tmp_path: Path,
) -> None:
    """containerd merges a drop-in over the root: a table of the agent's name in any file
    it loads is someone else's. It is left alone (Conflict), or with --adopt-handlers taken
    out of its file, kept, and written back when the agent lets go."""
    node = kubeadm_node(tmp_path, default_22(), "2.2.7")
    conf_d = node.config.parent / "conf.d"
    conf_d.mkdir()
    by_hand = conf_d / "10-team.toml"
    mine = (
        "version = 3\n"
        "# the team's own\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.hv]\n"
        "  runtime_type = 'io.containerd.runhcs.v1'\n"
        "  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.hv.options]\n"
        "    SandboxIsolation = 1\n"
    )
    by_hand.write_text(mine, encoding="utf-8")
    plan = make_plan(hyperv(), process())

    report = node.agent().reconcile(plan)

    assert states(report)["hv"] == ("Conflict", "ConflictingTable")
    assert PROGRAM_FILES + r"\conf.d\10-team.toml" in (report.handlers or {})["hv"].message
    assert states(report)["proc"] == ("Ready", "CanaryPassed")
    assert by_hand.read_text(encoding="utf-8") == mine
    assert "hv" not in runtimes_in(drop_in(node).read_text(encoding="utf-8"))

    adopted = node.agent_with(adopt={"hv"}).reconcile(plan)
    assert states(adopted)["hv"] == ("Ready", "CanaryPassed")
    assert "hv" not in runtimes_in(by_hand.read_text(encoding="utf-8"))
    assert node.loaded_runtimes()["hv"] == plan.handlers["hv"].runtime

    released = node.agent_with(adopt={"hv"}).reconcile(make_plan(process()))
    assert released.result == "applied"
    assert by_hand.read_text(encoding="utf-8") == mine


def test_containerd_upgraded_from_1_7_moves_the_handlers_in_one_restart(
    tmp_path: Path,
) -> None:
    """The node's config.toml stays the 1.7 one (version 2) when containerd is upgraded to
    2.2: the merged tables move into a version-2 drop-in (2.2 merges only files of the
    root's schema), the root gains the import, one restart, no drift reported."""
    original = (CONFIGS / "v2-containerd-1.7-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "1.7.20")
    plan = make_plan(hyperv())
    first = node.agent().reconcile(plan)
    assert first.placement is not None
    assert first.placement.way == "merge"
    assert MARKER in (node.disk_text() or "")

    node.containerd_version = "2.2.7"
    moved = node.agent().reconcile(plan)

    assert moved.result == "applied"
    assert moved.restarts == ["apply"]
    assert moved.drift_repaired == []
    assert states(moved) == {"hv": ("Ready", "CanaryPassed")}
    assert moved.placement is not None
    assert moved.placement.way == "drop-in"
    root = node.disk_text() or ""
    assert MARKER not in root
    assert tomllib.loads(root)["imports"] == [PROGRAM_FILES + r"\conf.d\*.toml"]
    assert tomllib.loads(drop_in(node).read_text(encoding="utf-8"))["version"] == 2
    assert node.loaded_runtimes()["hv"] == plan.handlers["hv"].runtime

    node.agent().uninstall()
    assert node.disk_text() == original
    assert not drop_in(node).exists()


def test_restart_mode_none_writes_and_waits_for_the_owners_restart(tmp_path: Path) -> None:
    node = kubeadm_node(tmp_path, default_22(), "2.2.7", restart_mode="none")
    plan = make_plan(hyperv())

    report = node.agent().reconcile(plan)

    assert report.result == "restart_required"
    assert report.restarts == []
    assert node.restarts == []
    assert drop_in(node).exists()
    assert states(report) == {"hv": ("Pending", "RestartRequired")}
    assert report.restart_required
    assert any(reason == "RestartRequired" for reason, _, _ in report.events)

    waiting = node.agent().reconcile(plan)
    assert (waiting.restarts, states(waiting)) == ([], {"hv": ("Pending", "RestartRequired")})

    node.host().containerd.restart(60.0)  # the node's owner restarts containerd
    loaded = node.agent().reconcile(plan)
    assert states(loaded) == {"hv": ("Ready", "CanaryPassed")}
    assert not loaded.restart_required
    assert loaded.restarts == []


def test_a_drop_in_deleted_behind_the_agent_is_written_again_and_said(
    tmp_path: Path,
) -> None:
    node = kubeadm_node(tmp_path, default_22(), "2.2.7")
    plan = make_plan(hyperv())
    node.agent().reconcile(plan)
    text = drop_in(node).read_text(encoding="utf-8")

    drop_in(node).unlink()  # a reimage, an installer, a hand
    report = node.agent().reconcile(plan)

    assert drop_in(node).read_text(encoding="utf-8") == text
    assert report.rewritten == [str(drop_in(node))]
    assert any(reason == "ConfigRewritten" for reason, _, _ in report.events)
    assert report.drift_repaired == ["hv"]
    assert report.restarts == ["apply"]


def test_a_schema_1_file_on_2_3_is_merged_in_its_own_names(tmp_path: Path) -> None:
    """containerd 2.3 migrates a schema-1 file with all its CRI settings: the agent merges
    into it as on 1.7, without a version line."""
    original = (DIST / "gke-kubeup-containerd-config.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "2.3.4")

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("merge", "SchemaV1Merge")
    merged = tomllib.loads(node.disk_text() or "")
    assert "version" not in merged
    assert "hv" in merged["plugins"]["cri"]["containerd"]["runtimes"]
    assert states(report) == {"hv": ("Ready", "CanaryPassed")}


def test_on_1_7_an_import_that_sets_cri_settings_refuses_the_merge(tmp_path: Path) -> None:
    """1.7 replaces the root's whole CRI table by an imported one: the agent's merged
    handlers would vanish, so it says so instead of writing."""
    original = (CONFIGS / "v2-containerd-1.7-default.toml").read_text(encoding="utf-8")
    extra = tmp_path / "extra.toml"
    extra.write_text(
        "version = 2\n[plugins.'io.containerd.grpc.v1.cri']\nsandbox_image = 'x/pause:1'\n",
        encoding="utf-8",
    )
    text = original.replace("imports = []", f"imports = ['{extra}']")
    node = kubeadm_node(tmp_path, text, "1.7.20")

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "refused"
    assert states(report) == {"hv": ("Failed", "ConfigRefused")}
    assert "drops every CRI setting of the root" in (report.handlers or {})["hv"].message
    assert node.disk_text() == text


def test_a_change_containerd_refuses_puts_every_file_back(tmp_path: Path) -> None:
    """The drop-in and the root's new import are one change: containerd not coming up
    with them puts both back (the drop-in deleted, the root as it was), one rollback."""
    original = (CONFIGS / "v3-containerd-2.0-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "2.0.4")
    node.faults.restart_fail = {"hv"}

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "rolled_back"
    assert report.restarts == ["apply", "rollback"]
    assert states(report) == {"hv": ("Failed", "ContainerdRolledBack")}
    assert node.disk_text() == original
    assert not drop_in(node).exists()
    state = load_state(node.root / "config.toml.wcow-state.json")[0]
    assert state.placement is None
    assert state.undo is None


def test_an_agent_killed_before_the_restart_is_recovered_from_every_backup(
    tmp_path: Path,
) -> None:
    """Killed between writing the drop-in and the root's import and restarting: the next
    agent restarts first; containerd refusing the files, every file goes back (the root
    from its backup, the drop-in the change created deleted)."""
    original = (CONFIGS / "v3-containerd-2.0-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "2.0.4")
    node.faults.kills_left = 1
    plan = make_plan(hyperv())
    with pytest.raises(SimulatedCrash):
        node.agent().reconcile(plan)
    assert drop_in(node).exists()
    node.faults.restart_fail = {"hv"}

    report = node.agent().reconcile(plan)

    assert report.restarts == ["recovery", "rollback"]
    assert any(reason == "RestartRecovery" for reason, _, _ in report.events)
    assert node.running_text == original
    assert node.disk_text() == original
    assert not drop_in(node).exists()
    assert states(report) == {"hv": ("Failed", "ConfigRejectedBefore")}


RKE2_ETC = r"C:\var\lib\rancher\rke2\agent\etc\containerd"


class Rke2Node(FakeNode):
    """An RKE2 node: config.toml rendered at every start from config-v3.toml.tmpl (else
    config.toml.tmpl), the base standing for ``{{ template "base" . }}``; the test double
    of k3s's renderer for templates that hold nothing but that call and TOML (the real
    template text is rendered with Go's text/template in test_placement_loads.py)."""

    def __init__(self, tmp_path: Path, base: str, **kwargs: Any) -> None:
        self.base = base
        paths = DriveMappedPaths(tmp_path)
        folder = paths.node_path(RKE2_ETC)
        folder.mkdir(parents=True)
        layout = NodeLayout(
            "rke2",
            folder / "config.toml",
            template=folder / "config-v3.toml.tmpl",
            service_name="rke2",
        )
        super().__init__(folder, config_text=base, paths=paths, layout=layout, **kwargs)

    def before_start(self) -> None:
        for name in ("config-v3.toml.tmpl", "config.toml.tmpl"):
            template = self.config.with_name(name)
            if template.exists():
                text = template.read_text(encoding="utf-8")
                self.config.write_text(
                    text.replace('{{ template "base" . }}', self.base.rstrip("\n")), "utf-8"
                )
                return
        self.config.write_text(self.base, encoding="utf-8")


def rke2_base() -> str:
    """RKE2 1.34/1.35.0's render: k3s's base before it imported config-v3.toml.d."""
    text = (DIST / "rke2-windows-config.toml").read_text(encoding="utf-8")
    return "".join(row for row in text.splitlines(True) if not row.startswith("imports"))


def test_an_rke2_node_gets_the_template_and_its_restart_renders_the_handlers(
    tmp_path: Path,
) -> None:
    node = Rke2Node(tmp_path, rke2_base(), containerd_version="2.2.6")
    plan = make_plan(hyperv())

    report = node.agent().reconcile(plan)

    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("template", "RenderedFromTemplate")
    assert report.result == "applied"
    assert states(report) == {"hv": ("Ready", "CanaryPassed")}
    template = node.config.with_name("config-v3.toml.tmpl")
    assert template.read_text(encoding="utf-8").startswith('{{ template "base" . }}\n')
    assert "hv" in runtimes_in(node.disk_text() or "")  # rendered by the node, not the agent
    again = node.agent().reconcile(plan)
    assert (again.result, again.restarts) == ("unchanged", [])

    node.agent().uninstall()
    assert not template.exists()
    assert node.disk_text() == rke2_base()


def test_an_rke2_node_that_does_not_render_the_template_is_rolled_back(
    tmp_path: Path,
) -> None:
    """The agent checks after the restart that config.toml was rendered with its tables:
    a template rke2 does not read (a wrong --config-template) fails closed."""
    node = Rke2Node(tmp_path, rke2_base(), containerd_version="2.2.6")
    node.before_start = lambda: None  # type: ignore[method-assign]

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "rolled_back"
    assert states(report)["hv"][0] == "Failed"
    assert "did not render config.toml from that template" in (report.handlers or {})["hv"].message
    assert not node.config.with_name("config-v3.toml.tmpl").exists()


def test_an_rke2_render_that_imports_a_folder_gets_a_drop_in_there(tmp_path: Path) -> None:
    rendered = (DIST / "rke2-windows-config.toml").read_text(encoding="utf-8")
    node = Rke2Node(tmp_path, rendered, containerd_version="2.3.4")

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("drop-in", "RenderedConfigImports")
    assert states(report) == {"hv": ("Ready", "CanaryPassed")}
    assert (node.config.parent / "config-v3.toml.d" / DROP_IN_NAME).exists()
    assert not node.config.with_name("config-v3.toml.tmpl").exists()


def test_restart_mode_none_on_1_7_learns_from_the_canary(tmp_path: Path) -> None:
    """containerd 1.7 reports no handler list over CRI: the canary tells. Refused with
    RuntimeNotLoaded, the handler waits (no restart asked for); once containerd's owner
    restarted it, the canary passes and the change counts as loaded."""
    original = (CONFIGS / "v2-containerd-1.7-default.toml").read_text(encoding="utf-8")
    node = kubeadm_node(tmp_path, original, "1.7.20", restart_mode="none")
    plan = make_plan(hyperv())

    written = node.agent().reconcile(plan)
    assert (written.result, written.restarts) == ("restart_required", [])
    assert states(written) == {"hv": ("Pending", "RestartRequired")}

    waiting = node.agent().reconcile(plan)
    assert states(waiting) == {"hv": ("Pending", "RestartRequired")}
    assert waiting.restarts == []
    assert node.restarts == []

    node.host().containerd.restart(60.0)
    loaded = node.agent().reconcile(plan)
    assert states(loaded) == {"hv": ("Ready", "CanaryPassed")}
    state = load_state(node.root / "config.toml.wcow-state.json")[0]
    assert state.loaded == state.written
