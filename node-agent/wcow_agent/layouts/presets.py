"""Each distribution's node layout: where containerd's configuration lives, what rewrites it,
how containerd restarts and where its tools are (``--distribution NAME``).

Read from each distribution's public sources (docs/distributions.md has the table with the
files and commits):

- kubeadm + sig-windows-tools: ``hostprocess/Install-Containerd.ps1`` writes
  ``%ProgramFiles%\\containerd\\config.toml`` once (``containerd config default``), registers
  the ``containerd`` service and puts crictl beside containerd.exe;
- AKS: AgentBaker ``staging/cse/windows/containerdfunc.ps1`` writes the same path at
  provisioning (service ``containerd`` under nssm, no ``--config``); crictl is on PATH
  (``vhdbuilder/packer/windows/configure-windows-vhd.ps1``);
- EKS: no public source names the path or its writer: the generic layout, unconfirmed;
- GKE: its node scripts are not public; its ancestor kube-up
  (``cluster/gce/windows/k8s-node-setup.psm1``) keeps containerd.exe and crictl.exe in
  ``C:\\etc\\kubernetes\\node\\bin`` and writes the service's ``--config`` file (else the
  default) at every boot;
- RKE2: k3s ``pkg/agent/config/config.go`` and ``pkg/agent/containerd/config.go`` render
  ``<data-dir>\\agent\\etc\\containerd\\config.toml`` from ``config-v3.toml.tmpl`` (else
  ``config.toml.tmpl``) at every rke2 start, the base template importing
  ``config-v3.toml.d\\*.toml`` (k3s b51167a9); containerd is a child of the ``rke2`` service
  (rke2 ``pkg/executor/pebinary/pebinary.go``); crictl and containerd are in
  ``<data-dir>\\bin`` (rke2 ``Dockerfile.windows``, ``pkg/bootstrap/bootstrap.go``);
- OpenShift (WMCO): ``pkg/windows/windows.go`` copies ``C:\\k\\containerd\\containerd_conf.toml``
  and ``pkg/services/services.go`` runs ``C:\\k\\containerd\\containerd.exe --config ...``;
  WMCO ships no crictl.

crictl: the agent's image carries its own (``IMAGE_CRICTL``, built from the pinned
cri-tools module); without it (the agent run from a checkout), the distribution's: RKE2's and
kube-up's in their bin folders, elsewhere ``crictl.exe`` on PATH (sig-windows-tools puts
``%ProgramFiles%\\containerd``, where it extracts crictl, on the machine's PATH).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PureWindowsPath
from typing import Final, Literal

from wcow_agent.config.layout import Distribution, NodeLayout

PresetName = Literal["kubeadm", "aks", "eks", "gke", "rke2", "openshift"]
PRESETS: Final[tuple[PresetName, ...]] = ("kubeadm", "aks", "eks", "gke", "rke2", "openshift")
IMAGE_CRICTL: Final = r"crictl\crictl.exe"
"""Where the agent's image puts crictl, relative to the container's mount point
(``%CONTAINER_SANDBOX_MOUNT_POINT%``; deploy/docker/agent.windows.Dockerfile)."""
RKE2_DATA_DIR: Final = r"C:\var\lib\rancher\rke2"
"""rke2's default ``--data-dir`` (``filepath.Abs("/var/lib/rancher/rke2")`` on drive C:)."""
WMCO_CONTAINERD_DIR: Final = r"C:\k\containerd"
KUBE_UP_BIN: Final = r"C:\etc\kubernetes\node\bin"


@dataclass(frozen=True)
class NodeEnvironment:
    """What the presets take from the machine the agent runs on (pure inputs)."""

    program_files: str = r"C:\Program Files"
    image_crictl: str | None = None
    """The agent image's crictl.exe when it is there; None: not running from the image."""

    def containerd_dir(self) -> str:
        return self.program_files + r"\containerd"


def default_config(env: NodeEnvironment) -> str:
    """containerd's own default ``--config`` on Windows (``defaults_windows.go``)."""
    return env.containerd_dir() + r"\config.toml"


def preset(
    name: PresetName, env: NodeEnvironment, *, rke2_data_dir: str = RKE2_DATA_DIR
) -> NodeLayout:
    """The layout ``--distribution NAME`` stands for, before any flag overrides it."""
    if name == "rke2":
        return rke2_layout(rke2_data_dir, env)
    if name == "openshift":
        return _layout(
            "openshift",
            WMCO_CONTAINERD_DIR + r"\containerd_conf.toml",
            containerd=WMCO_CONTAINERD_DIR + r"\containerd.exe",
            crictl=env.image_crictl or "crictl.exe",
            why="OpenShift (WMCO): its containerd_conf.toml, copied back on reconfigure",
        )
    if name == "gke":
        return _layout(
            "gke",
            default_config(env),
            containerd=KUBE_UP_BIN + r"\containerd.exe",
            crictl=env.image_crictl or KUBE_UP_BIN + r"\crictl.exe",
            why="GKE (kube-up's layout; GKE's own node scripts are not public)",
        )
    return _layout(
        name,
        default_config(env),
        drop_in_dir=env.containerd_dir() + r"\conf.d",
        containerd=env.containerd_dir() + r"\containerd.exe",
        crictl=env.image_crictl or "crictl.exe",
        why=_GENERIC_WHY[name],
    )


_GENERIC_WHY: Final[dict[str, str]] = {
    "kubeadm": "containerd's own layout (kubeadm, sig-windows-tools)",
    "aks": "AKS (AgentBaker): containerd's own layout, rewritten on reimage",
    "eks": "EKS: containerd's own layout assumed (no public source names it: unconfirmed)",
}


def rke2_layout(data_dir: str, env: NodeEnvironment, *, v2_template: bool = False) -> NodeLayout:
    """RKE2 under ``data_dir``: config.toml rendered from the template at every start,
    restarted through the ``rke2`` service. ``v2_template``: the node has only
    ``config.toml.tmpl`` (a version 2 base, whose drop-in folder is ``config.toml.d``)."""
    folder = PureWindowsPath(data_dir, "agent", "etc", "containerd")
    stem = "config.toml" if v2_template else "config-v3.toml"
    bin_dir = PureWindowsPath(data_dir, "bin")
    return _layout(
        "rke2",
        str(folder / "config.toml"),
        drop_in_dir=str(folder / f"{stem}.d"),
        template=str(folder / f"{stem}.tmpl"),
        service_name="rke2",
        containerd=str(bin_dir / "containerd.exe"),
        crictl=env.image_crictl or str(bin_dir / "crictl.exe"),
        why=f"RKE2 (data dir {data_dir}): config.toml rendered from {stem}.tmpl at every start",
    )


def _layout(
    distribution: Distribution,
    config: str,
    *,
    drop_in_dir: str | None = None,
    template: str | None = None,
    service_name: str = "containerd",
    containerd: str,
    crictl: str,
    why: str,
) -> NodeLayout:
    return NodeLayout(
        distribution=distribution,
        config=Path(config),
        drop_in_dir=Path(drop_in_dir) if drop_in_dir else None,
        template=Path(template) if template else None,
        restart_mode="service",
        service_name=service_name,
        containerd=Path(containerd),
        crictl=crictl,
        why=why,
    )


def with_why(layout: NodeLayout, why: str) -> NodeLayout:
    return replace(layout, why=why)
