"""``--distribution auto``: tell from what is on the node where its containerd keeps its
configuration, and which distribution set it up.

What is read (``NodeInventory``, the registry on Windows):

1. the ``rke2`` service (rke2 registers itself, ``pkg/cli/cmds/agent_service_windows.go``;
   containerd is its child, there is no ``containerd`` service): RKE2, under the service's
   ``--data-dir`` (else rke2's default); its template is ``config-v3.toml.tmpl`` unless only
   ``config.toml.tmpl`` exists (k3s checks them in that order);
2. else the ``containerd`` service's command line (its ``ImagePath``; through nssm's
   ``Parameters`` where nssm runs it, as on AKS): containerd.exe and its ``--config``
   (else containerd's default, ``%ProgramFiles%\\containerd\\config.toml``); the folders they
   are in and the node's markers name the distribution: ``C:\\k\\containerd`` is OpenShift's
   (WMCO), ``C:\\etc\\kubernetes\\node\\bin`` GKE's (kube-up), AgentBaker's provisioning
   result file ``C:\\AzureData\\provision.complete`` (``parts/windows/csecmd.ps1``) AKS's, the
   EKS bootstrap script's folder ``%ProgramFiles%\\Amazon\\EKS`` EKS's; otherwise containerd's
   own layout (the kubeadm preset), from what the service says;
3. rke2's data folder without its service: RKE2.

A node it cannot place (no containerd and no rke2 service, both services, a service command
line it cannot read) gets no layout but the reason, which the agent reports on every handler
instead of guessing where to write.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PureWindowsPath
from typing import Final

from wcow_agent.config.layout import NodeLayout
from wcow_agent.host.interfaces import NodeInventory
from wcow_agent.layouts.command_line import CommandLine, parse_command_line, split_arguments
from wcow_agent.layouts.presets import (
    KUBE_UP_BIN,
    RKE2_DATA_DIR,
    WMCO_CONTAINERD_DIR,
    NodeEnvironment,
    PresetName,
    default_config,
    preset,
    rke2_layout,
)

AKS_MARKER: Final = r"C:\AzureData\provision.complete"
NSSM: Final = "nssm.exe"


@dataclass(frozen=True)
class Discovery:
    layout: NodeLayout | None
    """None: the node could not be placed (``reason`` says why)."""
    reason: str


def discover(inventory: NodeInventory, env: NodeEnvironment) -> Discovery:
    rke2 = inventory.service_command_line("rke2")
    containerd = inventory.service_command_line("containerd")
    if rke2 is not None and containerd is not None:
        return _unplaced(
            "this node has both a containerd service and an rke2 service, so which one runs "
            "the containerd the kubelet talks to is not known: set --distribution (rke2, or "
            "the one that installed the containerd service)"
        )
    if rke2 is not None:
        return _rke2(inventory, env, parse_command_line(rke2).option("--data-dir", "-d"))
    if containerd is None:
        if inventory.exists(_folder_of(rke2_layout(RKE2_DATA_DIR, env).config)):
            return _rke2(inventory, env, None, found="rke2's folder (no rke2 service)")
        return _unplaced(
            "this node has no containerd service and no rke2 service: the agent cannot tell "
            "where containerd's configuration is; set --distribution, or --config with "
            "--containerd and --service-name"
        )
    command = _containerd_command(inventory, containerd)
    if isinstance(command, str):
        return _unplaced(command)
    return _from_service(inventory, env, command)


def _rke2(
    inventory: NodeInventory, env: NodeEnvironment, data_dir: str | None, found: str = ""
) -> Discovery:
    root = data_dir or RKE2_DATA_DIR
    v3 = rke2_layout(root, env)
    v2 = rke2_layout(root, env, v2_template=True)
    only_v2 = (
        v3.template is not None
        and v2.template is not None
        and not inventory.exists(str(v3.template))
        and inventory.exists(str(v2.template))
    )
    layout = v2 if only_v2 else v3
    how = found or f"the rke2 service (data dir {root})"
    return Discovery(replace(layout, why=f"{layout.why}; found {how}"), "")


def _containerd_command(inventory: NodeInventory, line: str) -> CommandLine | str:
    """containerd's own command line, through nssm where nssm runs it; a string: why not."""
    command = parse_command_line(line, inventory.exists)
    if not command.program:
        return f"the containerd service's command line {line!r} names no program"
    if PureWindowsPath(command.program).name.lower() != NSSM:
        return command
    application = inventory.service_parameter("containerd", "Application")
    if not application:
        return (
            f"the containerd service runs {command.program} (nssm) but names no Application "
            "under its Parameters: set --containerd and --config"
        )
    arguments = inventory.service_parameter("containerd", "AppParameters") or ""
    return CommandLine(application, tuple(split_arguments(arguments)))


def _from_service(
    inventory: NodeInventory, env: NodeEnvironment, command: CommandLine
) -> Discovery:
    binary = command.program
    config = command.option("--config", "-config", "-c") or default_config(env)
    name, marker = _distribution(inventory, env, binary, config)
    base = preset(name, env)
    layout = replace(
        base,
        config=Path(config),
        containerd=Path(binary),
        why=f"{base.why}; the containerd service runs {binary} with config {config}{marker}",
    )
    return Discovery(layout, "")


def _distribution(
    inventory: NodeInventory, env: NodeEnvironment, binary: str, config: str
) -> tuple[PresetName, str]:
    if _under(binary, WMCO_CONTAINERD_DIR) or _under(config, WMCO_CONTAINERD_DIR):
        return "openshift", ""
    if _under(binary, KUBE_UP_BIN):
        return "gke", ""
    if inventory.exists(AKS_MARKER):
        return "aks", f" ({AKS_MARKER} exists)"
    eks = env.program_files + r"\Amazon\EKS"
    if inventory.exists(eks):
        return "eks", f" ({eks} exists)"
    return "kubeadm", " (no distribution's marker found)"


def _folder_of(path: Path) -> str:
    return str(PureWindowsPath(str(path)).parent)


def _under(path: str, folder: str) -> bool:
    return PureWindowsPath(path).parent == PureWindowsPath(folder)


def _unplaced(reason: str) -> Discovery:
    return Discovery(None, reason)
