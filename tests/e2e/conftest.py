"""e2e tests run against a real API server: the cluster KUBECONFIG points at, or else the
project's local control plane (tests/control_plane.py), started once per session.

`make e2e` builds the control plane when missing and sets WCOW_E2E_REQUIRED=1, so a missing
cluster fails the run instead of skipping it. A plain `pytest` skips these tests with the
reason when there is neither a KUBECONFIG nor built binaries.

They create their own objects under a unique prefix and remove them. On a shared cluster,
run them with no other wcow-operator running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.control_plane import BUILD_SCRIPT, ROOT, missing_binaries, running


def _unavailable(reason: str) -> None:
    if os.environ.get("WCOW_E2E_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The kubeconfig of the cluster under test; KUBECONFIG in the environment points at it
    for the whole session, so subprocesses (the operator, agents) use it too."""
    given = os.environ.get("KUBECONFIG")
    if given:
        yield Path(given)
        return
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"no cluster: KUBECONFIG is not set and the local control plane is not built "
            f"(missing {', '.join(missing)}; run `make e2e` or {BUILD_SCRIPT.relative_to(ROOT)})"
        )
    with running(tmp_path_factory.mktemp("control-plane")) as plane:
        os.environ["KUBECONFIG"] = str(plane.kubeconfig)
        try:
            yield plane.kubeconfig
        finally:
            del os.environ["KUBECONFIG"]


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> client.ApiClient:
    try:
        config.load_kube_config(str(kubeconfig))
        api_client = client.ApiClient()
        client.VersionApi(api_client).get_code(_request_timeout=10)
    except Exception as error:  # noqa: BLE001 - any failure means: no usable cluster
        _unavailable(f"the cluster in {kubeconfig} is not reachable: {error}")
    return api_client


@pytest.fixture
def prefix() -> str:
    """A unique name prefix for this test's objects."""
    return f"e2e-{uuid.uuid4().hex[:6]}"
