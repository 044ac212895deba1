"""The fault suite: the tests kill and restart parts of the control plane,
so they get one of their own (tests/control_plane.py), never the session's shared one; each
test leaves it running for the next. Part of ``make e2e`` (marked e2e); needs the control
plane binaries even when KUBECONFIG points at a cluster: one cannot kill a cluster one does
not own.

kube-apiserver runs with a short ``--etcd-compaction-interval``: etcd forgets old versions
within seconds, so a watch resuming from a version it saw before a fault gets 410 Gone and
must list again, as after a day of uptime in production.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.conftest import _unavailable
from tests.control_plane import BUILD_SCRIPT, ROOT, ControlPlane, missing_binaries, running
from tests.e2e.operator_harness import (
    installed_crd,
    namespace,
    profiles_cleaned_up,
)
from tests.fleet.harness import Operator, View, running_fleet, running_operator
from tests.fleet.paced import (
    MEMORY,
    apply_windows,
    fleet_summary,
    hyperv_on_every_node,
    new_plan,
    patch_spec,
    reached,
)
from wcow_agent.simulator.fleet import Fleet

COMPACTION_INTERVAL = "10s"

# kube-apiserver SIGKILLed under open connections: urllib3 drops the broken sockets of the
# test's clients (and the in-process agents') to the garbage collector unclosed. Not what a
# fault test judges; without these filters, pytest's warnings-as-errors fail it at random.
UNCLOSED_ON_KILL = [
    pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning"
    ),
]


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        reason = (
            f"the fault tests need a control plane of their own: missing {', '.join(missing)} "
            f"(run {BUILD_SCRIPT.relative_to(ROOT)})"
        )
        if os.environ.get("KUBECONFIG"):
            # `make e2e` against a user's cluster builds nothing; that cluster is not ours
            # to kill, so these tests cannot run there.
            pytest.skip(reason)
        _unavailable(reason)
    with running(tmp_path_factory.mktemp("faults-plane"), COMPACTION_INTERVAL) as started:
        yield started


@pytest.fixture(scope="session")
def kube(plane: ControlPlane) -> client.ApiClient:
    """A client of the fault suite's control plane (shadows the session's ``kube``)."""
    return config.new_client_from_config(str(plane.kubeconfig))


@dataclass
class PacedChange:
    """A fleet on the fault suite's control plane, its operator, and a change rolling out:
    the HyperV profile ``hv`` went to every node at 2048 MB, then was changed to 3072 MB, and
    the first node has begun applying it (``since``: when the change was made)."""

    operator: Operator
    fleet: Fleet
    kube: client.ApiClient
    view: View
    ns: str
    hv: str
    change: str
    since: float

    def explain(self) -> str:
        return fleet_summary(self.view, self.kube, self.ns, self.hv)

    def finished(self) -> bool:
        """Every node runs the change and the profile says RolledOut for it."""
        return reached(self.view, self.kube, self.ns, self.hv, (MEMORY, 3072)) == self.change


@contextlib.contextmanager
def paced_change(
    plane: ControlPlane,
    kube: client.ApiClient,
    workdir: Path,
    name: str,
    nodes: int,
    *flags: str,
    canary_seconds: float = 1.0,
) -> Iterator[PacedChange]:
    """Namespace, CRD, operator (``flags``) and ``nodes`` simulated nodes named after
    ``name``; yields once the change rolls out (see ``PacedChange``)."""
    hv = f"{name}-hv"
    with (
        installed_crd(kube),
        namespace(kube, name) as ns,
        running_operator(plane.kubeconfig, ns, workdir / "operator.log", *flags) as operator,
        running_fleet(
            plane.kubeconfig, workdir / "fleet", ns, f"{name}-", nodes,
            canary_seconds=canary_seconds,
        ) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):  # fmt: skip
        yield start_change(operator, fleet, kube, ns, hv)


def start_change(
    operator: Operator, fleet: Fleet, kube: client.ApiClient, ns: str, hv: str
) -> PacedChange:
    """``hv`` at 2048 MB on every node, then changed to 3072 MB until the first node is in
    its canaries."""
    view = View(kube, [fleet])
    start = hyperv_on_every_node(operator, view, kube, ns, hv)
    since = time.time()
    patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
    change = new_plan(operator, kube, ns, start)
    operator.until(
        "the first nodes in their canaries",
        lambda: len(apply_windows(fleet.nodes, since)) >= 1,
    )
    return PacedChange(operator, fleet, kube, view, ns, hv, change, since)
