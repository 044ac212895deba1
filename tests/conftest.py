from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.control_plane import BUILD_SCRIPT, missing_binaries, running
from wcow_contract.errors import parse_profile
from wcow_contract.v1alpha1 import WindowsRuntimeProfile

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "deploy" / "samples"

MakeProfile = Callable[..., WindowsRuntimeProfile]


def profile_document(name: str = "hv", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"isolation": "HyperV", "windowsBuild": "ltsc2022"}
    body.update(spec)
    return {
        "apiVersion": "runtime.wcow.dev/v1alpha1",
        "kind": "WindowsRuntimeProfile",
        "metadata": {"name": name},
        "spec": copy.deepcopy(body),
    }


@pytest.fixture
def make_profile() -> MakeProfile:
    def make(name: str = "hv", **spec: Any) -> WindowsRuntimeProfile:
        return parse_profile(profile_document(name, **spec))

    return make


# -- a real API server (tests/e2e, tests/fleet): see tests/e2e/conftest.py --------------


# Set while the cluster under test is the local control plane this session started.
OWN_CONTROL_PLANE = "WCOW_E2E_OWN_CONTROL_PLANE"


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
        os.environ[OWN_CONTROL_PLANE] = "1"
        try:
            yield plane.kubeconfig
        finally:
            del os.environ["KUBECONFIG"]
            del os.environ[OWN_CONTROL_PLANE]


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
