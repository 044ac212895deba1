"""e2e tests run against the cluster KUBECONFIG points at, and skip with a reason otherwise.

They create their own objects under a unique prefix and remove them. Run them on a test
cluster (kind is enough) with no other wcow-operator running.
"""

from __future__ import annotations

import os
import uuid

import pytest
from kubernetes import client, config


@pytest.fixture(scope="session")
def kube() -> client.ApiClient:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: e2e tests need a cluster (e.g. `kind create cluster`)")
    try:
        config.load_kube_config()
        api_client = client.ApiClient()
        client.VersionApi(api_client).get_code(_request_timeout=10)
    except Exception as error:  # noqa: BLE001 - any failure means: no usable cluster
        pytest.skip(f"the cluster in KUBECONFIG is not reachable: {error}")
    return api_client


@pytest.fixture
def prefix() -> str:
    """A unique name prefix for this test's objects."""
    return f"e2e-{uuid.uuid4().hex[:6]}"
