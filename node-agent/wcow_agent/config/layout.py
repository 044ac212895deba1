"""Where a node keeps containerd's configuration, and how containerd restarts there.

The agent was written for one layout (kubeadm with sig-windows-tools): config.toml at
``%ProgramFiles%\\containerd\\config.toml``, written once and then left to us, and a Windows
service named ``containerd``. Distributions differ: RKE2 renders config.toml from a template
at every start under its own service, containerd 2.2+ reads drop-ins from a folder its root
file imports, OpenShift keeps the file elsewhere. A ``NodeLayout`` says, for one node, what
the agent writes to and how the new configuration reaches containerd; the distribution
presets and discovery build it (``--distribution``, ``--config`` ...), the configuration
writers (drop-in, template, merge) and the transaction read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

Distribution = Literal["kubeadm", "aks", "eks", "gke", "rke2", "openshift", "custom"]
DISTRIBUTIONS: Final[tuple[Distribution, ...]] = (
    "kubeadm",
    "aks",
    "eks",
    "gke",
    "rke2",
    "openshift",
    "custom",
)
RestartMode = Literal["service", "none"]
"""``service``: the agent restarts ``NodeLayout.service_name`` (containerd's own service, or
the service that owns containerd: ``rke2``); ``none``: the agent writes, reports
``RestartRequired`` and waits for the node's owner to restart containerd."""
DROP_IN_NAME: Final = "wcow-runtime.toml"
"""The agent's own drop-in file, in the folder the root config imports."""


@dataclass(frozen=True)
class NodeLayout:
    distribution: Distribution
    config: Path
    """containerd's root configuration file (what containerd is started with)."""
    drop_in_dir: Path | None = None
    """A folder the root file imports (``imports = ['<dir>\\*.toml']``) or may be made to
    import, where the agent may keep its own ``DROP_IN_NAME``; None: no drop-in here."""
    template: Path | None = None
    """The distribution's template config.toml is rendered from at every start (RKE2's
    ``config-v3.toml.tmpl``); when set, config.toml itself is never edited."""
    restart_mode: RestartMode = "service"
    service_name: str = "containerd"
    """The service restarted for a new configuration: containerd's, or its owner's (rke2)."""
    containerd: Path | None = None
    """containerd.exe (version, ``config default``, ``config dump``); None: the default."""
    crictl: str = "crictl.exe"
    """The CRI client: a path, or a name looked up on PATH."""
    why: str = ""
    """How the layout was found (the preset, what discovery read), for the agent's status
    and log."""
    unplaced: str | None = None
    """Why the agent could not tell where this node keeps containerd's configuration
    (``--distribution auto`` found no containerd service, or two candidates); the agent then
    writes nothing and reports it on every handler (``NodeLayoutUnknown``), and ``config``
    is only where its lock and state go. None: the node is placed."""
