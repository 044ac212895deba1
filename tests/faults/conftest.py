"""The fault suite (issue 22 item 1): each test kills or freezes a real part, so each test
module gets a control plane of its own (tests/control_plane.py), never the session's shared
one. Part of ``make e2e`` (marked e2e); needs the control plane binaries even when
KUBECONFIG points at a cluster, since a cluster one does not own cannot be killed.

kube-apiserver runs with a short ``--etcd-compaction-interval``: etcd forgets old versions
within seconds, so a watch resuming from a version it saw before a fault gets 410 Gone and
must list again, as after a day of uptime in production.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from tests.conftest import _unavailable
from tests.control_plane import BUILD_SCRIPT, ControlPlane, missing_binaries, running

COMPACTION_INTERVAL = "10s"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"the fault tests need their own control plane: missing {', '.join(missing)} "
            f"(run `make e2e` or {BUILD_SCRIPT})"
        )
    with running(tmp_path_factory.mktemp("faults-plane"), COMPACTION_INTERVAL) as started:
        yield started


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> client.ApiClient:
    """A client of this module's control plane (shadows the session's ``kube``)."""
    return config.new_client_from_config(str(plane.kubeconfig))
