"""Image checks of the webhook on the real API server, with the real registry.

The operator runs with ``--resolve-images --insecure-registry HOST:PORT`` (the test registry
serves plain HTTP on loopback): a Hyper-V pod of guest build ltsc2019 whose image has no 17763
entry is refused with ImageBuildMismatch; one whose index has it is admitted with the image
pinned to that manifest's digest and the original in ``runtime.wcow.dev/original-images``;
an image on a registry that is down is admitted with an admission warning and counted.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    free_port,
    installed_crd,
    metric,
    namespace,
    profile,
    profiles_cleaned_up,
    running_operator,
    wait_for,
    windows_pod,
)
from tests.images.hostile import dribble, serving
from tests.registry import Registry, require_registry, running
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION
from wcow_operator.webhook.image_decision import ORIGINAL_IMAGES

pytestmark = pytest.mark.e2e


def _delete_configurations(kube: client.ApiClient) -> None:
    registration = client.AdmissionregistrationV1Api(kube)
    with contextlib.suppress(ApiException):
        registration.delete_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    with contextlib.suppress(ApiException):
        registration.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)


@pytest.fixture
def setup(kube: client.ApiClient, prefix: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    require_registry()
    custom = client.CustomObjectsApi(kube)
    node = client.NodeV1Api(kube)
    core = client.CoreV1Api(kube)
    guest = f"{prefix}-guest2019"
    port = free_port()
    with contextlib.ExitStack() as stack:
        registry: Registry = stack.enter_context(running(tmp_path / "registry"))
        stack.enter_context(installed_crd(kube))
        operator_ns = stack.enter_context(namespace(kube, f"{prefix}-system"))
        pods_ns = stack.enter_context(namespace(kube, f"{prefix}-pods"))
        stack.callback(_delete_configurations, kube)
        operator = stack.enter_context(
            running_operator(
                operator_ns, "--webhook-port", str(port), "--webhook-url",
                f"https://127.0.0.1:{port}", "--resolve-images",
                "--insecure-registry", registry.host, "--allowed-registries", "127.0.0.1:*",
            )
        )  # fmt: skip
        stack.enter_context(profiles_cleaned_up(kube, [guest]))
        body = profile(guest, isolation="HyperV", windowsBuild="ltsc2019")
        custom.create_cluster_custom_object("runtime.wcow.dev", "v1alpha1",
                                            "windowsruntimeprofiles", body)  # fmt: skip
        wait_for(f"RuntimeClass {guest}", lambda: node.read_runtime_class(guest))
        registration = client.AdmissionregistrationV1Api(kube)

        def registered() -> bool:
            hooks = registration.read_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
            return f'"{guest}"' in hooks.webhooks[0].match_conditions[0].expression

        wait_for("the webhook registered for the class", registered)
        wait_for("the default ServiceAccount",
                 lambda: core.read_namespaced_service_account("default", pods_ns))  # fmt: skip
        yield {"core": core, "ns": pods_ns, "class": guest, "registry": registry,
               "operator": operator}  # fmt: skip


def _pod(name: str, runtime_class: str, image: str) -> dict[str, Any]:
    body = windows_pod(name, runtime_class)
    body["spec"]["containers"][0]["image"] = image
    return body


def _create(core: client.CoreV1Api, ns: str, body: dict[str, Any], *, dry_run: bool) -> Any:
    data, _, headers = core.create_namespaced_pod_with_http_info(
        ns, body, dry_run="All" if dry_run else None
    )
    return core.api_client.sanitize_for_serialization(data), headers.get("Warning", "")


def test_images_refused_pinned_and_warned_on_the_real_api_server(setup: dict[str, Any]) -> None:
    core, ns, registry = setup["core"], setup["ns"], setup["registry"]
    old = registry.push_image("wcow/app", "10.0.17763.1234")
    new = registry.push_image("wcow/app", "10.0.20348.2655")
    registry.push_index("wcow/app", "multi", [old, new])
    registry.push_index("wcow/app", "ltsc2022", [new])

    # No 17763 entry: refused, naming the container, the image, its builds and the need.
    mismatched = _pod("mismatch", setup["class"], registry.reference("wcow/app", "ltsc2022"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, mismatched)
    refusal = str(caught.value.body)
    assert "ImageBuildMismatch" in refusal
    assert "spec.containers[app]" in refusal
    assert "10.0.20348.2655" in refusal
    assert "10.0.17763 (ltsc2019)" in refusal

    # The index has the guest build's entry: pinned to it, for real and then in a dry run
    # (which reads only the cache, here filled by the real one).
    multi = registry.reference("wcow/app", "multi")
    for name, dry_run in (("pinned", False), ("pinned-dry", True)):
        admitted, _ = _create(core, ns, _pod(name, setup["class"], multi), dry_run=dry_run)
        image = admitted["spec"]["containers"][0]["image"]
        assert image == registry.reference("wcow/app", old.digest)
        original = json.loads(admitted["metadata"]["annotations"][ORIGINAL_IMAGES])
        assert original == {"app": multi}
    stored = core.read_namespaced_pod("pinned", ns)
    assert stored.spec.containers[0].image == registry.reference("wcow/app", old.digest)

    # An UPDATE back to the tag (Kubernetes lets a pod's image change) cannot be pinned by the
    # validating webhook: refused, naming the reference to write instead.
    patch = {"spec": {"containers": [{"name": "app", "image": multi}]}}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("pinned", ns, patch)
    assert "ImageBuildMismatch" in str(caught.value.body)
    assert old.digest in str(caught.value.body)

    # A registry that is down: admitted as written, with a warning, and counted.
    down = f"127.0.0.1:{free_port()}/wcow/app:multi"
    before = metric(setup["operator"]["metrics"], "wcow_admission_images_unchecked_total")
    admitted, warning = _create(core, ns, _pod("down", setup["class"], down), dry_run=False)
    assert admitted["spec"]["containers"][0]["image"] == down
    assert "was not checked" in warning
    assert "cannot be reached" in warning
    after = metric(setup["operator"]["metrics"], "wcow_admission_images_unchecked_total")
    assert after == before + 1

    # A server-side dry run never waits on a registry: an uncached image is admitted with a
    # warning at once, whatever the registry (here one that never answers).
    with serving(dribble) as slow:
        reference = f"{slow.host}/wcow/app:slow"
        started = time.monotonic()
        admitted, warning = _create(core, ns, _pod("dry", setup["class"], reference), dry_run=True)
        took = time.monotonic() - started
    assert took < 0.9, took  # the lookup deadline is 1 s: it was not waited for
    assert "dry run" in warning
    assert slow.connections == []


def test_the_registry_secret_is_read_by_name_into_credentials(
    kube: client.ApiClient, prefix: str
) -> None:
    """K8s.secrets.RegistrySecret on the real API server: a dockerconfigjson Secret becomes
    per-host credentials (docker.io keys to Docker Hub's API host); a missing Secret or one of
    another shape gives None (anonymous lookups), never an exception."""
    import base64

    from wcow_operator.k8s.secrets import RegistrySecret
    from wcow_operator.registry.credentials import credentials_from_dockerconfig

    core = client.CoreV1Api(kube)
    config = {
        "auths": {
            "registry.lab:5000": {"auth": base64.b64encode(b"robot:s3cret").decode()},
            "https://index.docker.io/v1/": {"username": "hub", "password": "token"},
        }
    }
    with namespace(kube, f"{prefix}-secret") as ns:
        encoded = base64.b64encode(json.dumps(config).encode()).decode()
        core.create_namespaced_secret(ns, {
            "metadata": {"name": "pull"}, "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": encoded},
        })  # fmt: skip
        core.create_namespaced_secret(ns, {"metadata": {"name": "opaque"},
                                           "stringData": {"x": "y"}})  # fmt: skip
        document, scopes = RegistrySecret(kube, ns, "pull").read()
        assert credentials_from_dockerconfig(document or {}) == {
            "registry.lab:5000": ("robot", "s3cret"),
            "registry-1.docker.io": ("hub", "token"),
        }
        assert scopes is None  # no scopes.json: the credentials serve no pod
        assert RegistrySecret(kube, ns, "missing").read() == (None, None)
        assert RegistrySecret(kube, ns, "opaque").read() == (None, None)
