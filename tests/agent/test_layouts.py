"""Where each distribution keeps containerd's configuration: the presets, what
``--distribution auto`` reads on a node (through a ``NodeInventory`` double), Windows
command lines read as Windows reads them, and every flag over the preset."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from wcow_agent.commands.layout_flags import add_layout_flags, image_crictl, node_layout
from wcow_agent.config.layout import NodeLayout
from wcow_agent.layouts.command_line import (
    join_arguments,
    parse_command_line,
    split_arguments,
)
from wcow_agent.layouts.discovery import AKS_MARKER, discover
from wcow_agent.layouts.presets import PRESETS, NodeEnvironment, preset
from wcow_agent.layouts.resolve import LayoutFlags, hyperv_for, resolve_layout

ENV = NodeEnvironment()
IMAGE = NodeEnvironment(image_crictl=r"C:\hpc\crictl\crictl.exe")
PF = r"C:\Program Files\containerd"
RKE2 = r"C:\var\lib\rancher\rke2"
RKE2_ETC = RKE2 + r"\agent\etc\containerd"


@dataclass
class Inventory:
    """A Windows node's services and files, as ``NodeInventory`` reads them."""

    services: dict[str, str] = field(default_factory=dict)
    parameters: dict[tuple[str, str], str] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)

    def service_command_line(self, name: str) -> str | None:
        return self.services.get(name)

    def service_parameter(self, name: str, value: str) -> str | None:
        return self.parameters.get((name, value))

    def exists(self, path: str) -> bool:
        return path.lower() in {p.lower() for p in self.paths}


def row(layout: NodeLayout) -> tuple[object, ...]:
    return (
        layout.distribution,
        str(layout.config),
        str(layout.drop_in_dir) if layout.drop_in_dir else None,
        str(layout.template) if layout.template else None,
        layout.restart_mode,
        layout.service_name,
        str(layout.containerd),
        layout.crictl,
    )


# -- presets ------------------------------------------------------------------------------

PRESET_TABLE = {
    "kubeadm": (
        "kubeadm",
        PF + r"\config.toml",
        PF + r"\conf.d",
        None,
        "service",
        "containerd",
        PF + r"\containerd.exe",
        "crictl.exe",
    ),
    "gke": (
        "gke",
        PF + r"\config.toml",
        None,
        None,
        "service",
        "containerd",
        r"C:\etc\kubernetes\node\bin\containerd.exe",
        r"C:\etc\kubernetes\node\bin\crictl.exe",
    ),
    "rke2": (
        "rke2",
        RKE2_ETC + r"\config.toml",
        RKE2_ETC + r"\config-v3.toml.d",
        RKE2_ETC + r"\config-v3.toml.tmpl",
        "service",
        "rke2",
        RKE2 + r"\bin\containerd.exe",
        RKE2 + r"\bin\crictl.exe",
    ),
    "openshift": (
        "openshift",
        r"C:\k\containerd\containerd_conf.toml",
        None,
        None,
        "service",
        "containerd",
        r"C:\k\containerd\containerd.exe",
        "crictl.exe",
    ),
}
# AKS and EKS keep containerd's own layout too (they differ in Hyper-V, and in what rewrites
# the file: docs/distributions.md).
PRESET_TABLE["aks"] = ("aks", *PRESET_TABLE["kubeadm"][1:])
PRESET_TABLE["eks"] = ("eks", *PRESET_TABLE["kubeadm"][1:])


@pytest.mark.parametrize("name", PRESETS)
def test_each_distribution_has_its_layout(name: str) -> None:
    assert row(preset(name, ENV)) == PRESET_TABLE[name]


@pytest.mark.parametrize("name", PRESETS)
def test_the_image_crictl_is_every_distribution_default(name: str) -> None:
    assert preset(name, IMAGE).crictl == r"C:\hpc\crictl\crictl.exe"


def test_the_image_crictl_is_found_under_the_container_mount_point(tmp_path: Path) -> None:
    assert image_crictl({}) is None
    assert image_crictl({"CONTAINER_SANDBOX_MOUNT_POINT": str(tmp_path)}) is None
    (tmp_path / "crictl").mkdir()
    (tmp_path / "crictl" / "crictl.exe").write_bytes(b"MZ")
    found = image_crictl({"CONTAINER_SANDBOX_MOUNT_POINT": str(tmp_path)})
    assert found is not None
    assert Path(found) == tmp_path / "crictl" / "crictl.exe"


# -- Windows command lines ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "program", "args"),
    [
        (
            r'"C:\Program Files\containerd\containerd.exe" --run-service '
            r'--config "C:\My Configs\c.toml"',
            PF + r"\containerd.exe",
            ["--run-service", "--config", r"C:\My Configs\c.toml"],
        ),
        (
            r"C:\k\containerd\containerd.exe --config C:\k\containerd\containerd_conf.toml "
            r"--log-file C:\var\log\containerd\containerd.log --run-service --log-level info",
            r"C:\k\containerd\containerd.exe",
            [
                "--config",
                r"C:\k\containerd\containerd_conf.toml",
                "--log-file",
                r"C:\var\log\containerd\containerd.log",
                "--run-service",
                "--log-level",
                "info",
            ],
        ),
        # Unquoted with spaces: the prefix that names a program, as CreateProcess finds it.
        (
            r"C:\Program Files\containerd\containerd.exe --run-service",
            PF + r"\containerd.exe",
            ["--run-service"],
        ),
        (r'x.exe a\\"b c" d', "x.exe", [r"a\b c", "d"]),
        (r'x.exe a\"b "c""d"', "x.exe", ['a"b', 'c"d']),
        (r"x.exe C:\dir\ \\server\share", "x.exe", ["C:\\dir\\", r"\\server\share"]),
        ('x.exe "" --config=C:\\a.toml', "x.exe", ["", r"--config=C:\a.toml"]),
    ],
)
def test_service_command_lines_read_as_windows_reads_them(
    line: str, program: str, args: list[str]
) -> None:
    command = parse_command_line(line)
    assert command.program == program
    assert list(command.args) == args


@pytest.mark.parametrize(
    "args",
    [["a b", 'c"d', "e\\", 'f\\"g', "", r"C:\Program Files\x\\"], [r"--config=C:\a b\c.toml"]],
)
def test_quoting_and_splitting_are_inverse(args: list[str]) -> None:
    assert split_arguments(join_arguments(args)) == args


def test_options_take_every_spelling_and_the_last_wins() -> None:
    command = parse_command_line(r"c.exe -c A --config=B --config C -d")
    assert command.option("--config", "-c") == "C"
    assert command.option("--data-dir", "-d") is None
    assert parse_command_line("c.exe -config=D").option("--config", "-config") == "D"


# -- discovery ------------------------------------------------------------------------------


def test_kubeadm_node_from_the_containerd_service() -> None:
    node = Inventory(services={"containerd": rf'"{PF}\containerd.exe" --run-service'})
    found = discover(node, ENV)
    assert found.layout is not None
    assert row(found.layout) == PRESET_TABLE["kubeadm"]
    assert "no distribution's marker" in found.layout.why


def test_the_service_config_flag_is_the_config() -> None:
    node = Inventory(
        services={
            "containerd": r'"D:\ctr bin\containerd.exe" --config "D:\ctr conf\c.toml" --run-service'
        }
    )
    layout = discover(node, ENV).layout
    assert layout is not None
    assert str(layout.config) == r"D:\ctr conf\c.toml"
    assert str(layout.containerd) == r"D:\ctr bin\containerd.exe"


def test_openshift_from_wmco_folder() -> None:
    line = (
        r"C:\k\containerd\containerd.exe --config C:\k\containerd\containerd_conf.toml "
        r"--log-file C:\var\log\containerd\containerd.log --run-service --log-level info"
    )
    layout = discover(Inventory(services={"containerd": line}), ENV).layout
    assert layout is not None
    assert row(layout) == PRESET_TABLE["openshift"]


def test_gke_from_kube_up_bin_folder() -> None:
    line = (
        r"C:\etc\kubernetes\node\bin\containerd.exe --run-service "
        r"--log-file C:\etc\kubernetes\logs\containerd.log"
    )
    layout = discover(Inventory(services={"containerd": line}), ENV).layout
    assert layout is not None
    assert row(layout) == PRESET_TABLE["gke"]


def test_aks_through_nssm_and_its_provisioning_marker() -> None:
    node = Inventory(
        services={"containerd": r"C:\k\nssm.exe"},
        parameters={("containerd", "Application"): PF + r"\containerd.exe"},
        paths={AKS_MARKER},
    )
    layout = discover(node, ENV).layout
    assert layout is not None
    assert row(layout) == PRESET_TABLE["aks"]
    assert AKS_MARKER in layout.why


def test_nssm_parameters_carry_the_config() -> None:
    node = Inventory(
        services={"containerd": r"C:\k\nssm.exe"},
        parameters={
            ("containerd", "Application"): PF + r"\containerd.exe",
            ("containerd", "AppParameters"): r'--config "E:\c d\config.toml"',
        },
    )
    layout = discover(node, ENV).layout
    assert layout is not None
    assert str(layout.config) == r"E:\c d\config.toml"


def test_nssm_without_application_is_unplaced() -> None:
    found = discover(Inventory(services={"containerd": r"C:\k\nssm.exe"}), ENV)
    assert found.layout is None
    assert "nssm" in found.reason


def test_eks_from_its_bootstrap_folder() -> None:
    node = Inventory(
        services={"containerd": rf'"{PF}\containerd.exe" --run-service'},
        paths={r"C:\Program Files\Amazon\EKS"},
    )
    layout = discover(node, ENV).layout
    assert layout is not None
    assert layout.distribution == "eks"


def test_rke2_from_its_service_and_data_dir() -> None:
    node = Inventory(services={"rke2": r'"C:\usr\local\bin\rke2.exe" agent --data-dir D:\rke2'})
    layout = discover(node, ENV).layout
    assert layout is not None
    assert str(layout.config) == r"D:\rke2\agent\etc\containerd\config.toml"
    assert str(layout.template) == r"D:\rke2\agent\etc\containerd\config-v3.toml.tmpl"
    assert layout.service_name == "rke2"
    layout = discover(Inventory(services={"rke2": r"C:\usr\local\bin\rke2.exe agent"}), ENV).layout
    assert layout is not None
    assert row(layout) == PRESET_TABLE["rke2"]


def test_rke2_with_only_a_version_2_template_uses_it() -> None:
    node = Inventory(services={"rke2": "rke2.exe agent"}, paths={RKE2_ETC + r"\config.toml.tmpl"})
    layout = discover(node, ENV).layout
    assert layout is not None
    assert str(layout.template) == RKE2_ETC + r"\config.toml.tmpl"
    assert str(layout.drop_in_dir) == RKE2_ETC + r"\config.toml.d"


def test_rke2_folder_without_a_service() -> None:
    layout = discover(Inventory(paths={RKE2_ETC}), ENV).layout
    assert layout is not None
    assert layout.distribution == "rke2"


@pytest.mark.parametrize(
    ("node", "words"),
    [
        (Inventory(), "no containerd service and no rke2 service"),
        (
            Inventory(services={"containerd": "containerd.exe", "rke2": "rke2.exe agent"}),
            "both a containerd service and an rke2 service",
        ),
        (Inventory(services={"containerd": "   "}), "names no program"),
    ],
)
def test_a_node_it_cannot_place_says_why(node: Inventory, words: str) -> None:
    found = discover(node, ENV)
    assert found.layout is None
    assert words in found.reason


# -- flags over presets ---------------------------------------------------------------------


def test_every_flag_overrides_its_preset() -> None:
    flags = LayoutFlags(
        distribution="rke2",
        config=r"D:\c.toml",
        drop_in_config="",
        config_template=r"D:\t.tmpl",
        restart_mode="none",
        service_name="other",
        containerd=r"D:\containerd.exe",
        crictl=r"D:\crictl.exe",
    )
    layout = resolve_layout(flags, ENV, None, unplaced_config="x")
    assert row(layout) == (
        "rke2",
        r"D:\c.toml",
        None,
        r"D:\t.tmpl",
        "none",
        "other",
        r"D:\containerd.exe",
        r"D:\crictl.exe",
    )
    assert "overridden by --config, --drop-in-config" in layout.why


def test_a_named_distribution_reads_nothing_on_the_node() -> None:
    node = Inventory(services={"containerd": r"C:\k\containerd\containerd.exe"})
    layout = resolve_layout(LayoutFlags(distribution="kubeadm"), ENV, node, unplaced_config="x")
    assert row(layout) == PRESET_TABLE["kubeadm"]


def test_unplaced_node_keeps_its_reason_unless_the_config_is_named() -> None:
    layout = resolve_layout(LayoutFlags(), ENV, Inventory(), unplaced_config=r"W:\u\config.toml")
    assert layout.unplaced is not None
    assert "no containerd service" in layout.unplaced
    assert str(layout.config) == r"W:\u\config.toml"
    assert layout.restart_mode == "none"
    named = resolve_layout(LayoutFlags(config=r"D:\c.toml"), ENV, Inventory(), unplaced_config="x")
    assert named.unplaced is None
    assert str(named.config) == r"D:\c.toml"
    assert named.distribution == "custom"


def test_without_an_inventory_auto_is_containerd_own_layout() -> None:
    layout = resolve_layout(LayoutFlags(), ENV, None, unplaced_config="x")
    assert row(layout)[1:] == PRESET_TABLE["kubeadm"][1:]
    assert layout.distribution == "custom"


def test_command_flags_reach_the_layout(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_layout_flags(parser)
    parser.add_argument("--work-dir", default=str(tmp_path))
    args = parser.parse_args(["--distribution", "openshift", "--crictl", r"C:\tools\crictl.exe"])
    layout = node_layout(args, None)
    assert str(layout.config) == r"C:\k\containerd\containerd_conf.toml"
    assert layout.crictl == r"C:\tools\crictl.exe"
    with pytest.raises(SystemExit):
        parser.parse_args(["--distribution", "k3s"])


# -- Hyper-V per platform -------------------------------------------------------------------


def test_aks_and_gke_never_ask_windows_about_hyperv() -> None:
    for name, words in (("aks", "Azure/AKS#1792"), ("gke", "Hyper-V containers are not supported")):
        flag, why = hyperv_for(preset(name, ENV), "auto")
        assert flag == "no"
        assert why is not None
        assert words in why
        assert hyperv_for(preset(name, ENV), "yes")[0] == "yes"  # the user's word stands


def test_eks_asks_windows_and_says_which_instances_can() -> None:
    flag, why = hyperv_for(preset("eks", ENV), "auto")
    assert flag == "auto"
    assert why is not None
    assert "C8i" in why
    assert "metal" in why


@pytest.mark.parametrize("name", ["kubeadm", "rke2", "openshift"])
def test_elsewhere_the_host_decides(name: str) -> None:
    assert hyperv_for(preset(name, ENV), "auto") == ("auto", None)
