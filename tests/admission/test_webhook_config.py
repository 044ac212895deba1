"""The webhook configurations (render.webhooks), the keeper that writes them, their RBAC."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import urllib3

from wcow_operator import rbac
from wcow_operator.k8s.webhook_configurations import OWNER_NAME, PERMISSIONS
from wcow_operator.render.webhooks import (
    MAX_CAS,
    Endpoint,
    OwnerReference,
    match_condition,
    merged_ca_bundle,
    webhook_configuration,
)
from wcow_operator.settings import SettingsError, parse_settings
from wcow_operator.webhook.certificates import Authority, ServingCertificate, self_signed
from wcow_operator.webhook.configurations import OwnerMissingError, WebhookKeeper
from wcow_operator.webhook.serving import WebhookSettings


def test_every_webhook_call_is_granted_and_only_by_name() -> None:
    rules = rbac.operator_webhook_rules(OWNER_NAME)
    for permissions in PERMISSIONS.values():
        for group, resource, verb, _scope, name in permissions:
            assert rbac.allows(rules, group, resource, verb, name)
            if name is not None:
                assert not rbac.allows(rules, group, resource, verb, "x")
    # Without the webhook the operator holds none of these.
    for permissions in PERMISSIONS.values():
        for group, resource, verb, _scope, name in permissions:
            assert not rbac.allows(rbac.OPERATOR_CLUSTER_RULES, group, resource, verb, name)


def test_only_pods_of_wcow_classes_outside_system_namespaces_reach_the_webhook() -> None:
    body = webhook_configuration(
        "mutating",
        Endpoint(service_namespace="wcow-system", service_name="wcow-webhook"),
        ["hv", "proc"],
        ["kube-system", "wcow-system"],
        ca_bundle=None,
    )
    hook = body["webhooks"][0]
    assert hook["matchConditions"] == [
        {
            "name": "wcow-runtime-class",
            "expression": "has(object.spec.runtimeClassName) && "
            'object.spec.runtimeClassName in ["hv", "proc"]',
        }
    ]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "wcow-system",
    ]
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] <= 10
    assert hook["clientConfig"]["service"]["path"] == "/mutate-pods"
    assert match_condition([])["expression"] == "false"


def _pem(pod: str | None = None) -> str:
    return Authority(pod or f"pod-{uuid.uuid4().hex[:6]}").ca_pem


def test_ca_bundle_keeps_other_replicas_cas_up_to_a_limit() -> None:
    first, second = _pem(), _pem()
    bundle = merged_ca_bundle(merged_ca_bundle(None, first), second)
    text = base64.b64decode(bundle).decode()
    assert text.index(second.strip()) < text.index(first.strip())
    assert merged_ca_bundle(bundle, second) == bundle  # nothing new: the same bytes
    for _ in range(MAX_CAS + 2):
        bundle = merged_ca_bundle(bundle, _pem())
    assert base64.b64decode(bundle).decode().count("BEGIN CERTIFICATE") == MAX_CAS


def test_a_restarted_pods_new_ca_replaces_its_old_one() -> None:
    """A crash-looping replica must not push the healthy replicas' CAs out of the bundle."""
    healthy = _pem("operator-a")
    bundle = merged_ca_bundle(None, healthy)
    for _ in range(MAX_CAS + 3):
        bundle = merged_ca_bundle(bundle, _pem("operator-b"))  # the same pod, restarted
    text = base64.b64decode(bundle).decode()
    assert text.count("BEGIN CERTIFICATE") == 2
    assert healthy.strip() in text


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes = 0

    def read(self, kind: str) -> dict[str, Any] | None:
        return self.objects.get(kind)

    def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        self.objects[kind] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return self.objects[kind]

    def replace(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        version = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.objects[kind] = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        return self.objects[kind]


def test_keeper_writes_on_change_only() -> None:
    api = FakeApi()
    classes = ["hv"]
    certificate = self_signed(["127.0.0.1"])
    settings = WebhookSettings(
        port=9443, endpoint=Endpoint(url="https://127.0.0.1:9443"), excluded_namespaces=("x",)
    )
    keeper = WebhookKeeper(api, settings, certificate, lambda: classes)
    assert keeper.sync() == 2
    assert keeper.sync() == 0  # at rest: no writes
    classes.append("proc")
    assert keeper.sync() == 2
    other = WebhookKeeper(
        api,
        settings,
        ServingCertificate(_pem(), certificate.certfile, certificate.keyfile),
        lambda: classes,
    )
    assert other.sync() == 2  # a second replica adds its CA
    bundle = api.objects["validating"]["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(bundle).decode().count("BEGIN CERTIFICATE") == 2
    assert keeper.sync() == 0


OWNER = OwnerReference("rbac.authorization.k8s.io/v1", "ClusterRole", "wcow-webhook", "uid-1")


class OwnedApi(FakeApi):
    def __init__(self, owner: OwnerReference | None) -> None:
        super().__init__()
        self.owner_ref = owner

    def owner(self, cluster_role: str) -> OwnerReference | None:
        assert cluster_role == "wcow-webhook"
        return self.owner_ref


def _owned_keeper(api: OwnedApi) -> WebhookKeeper:
    settings = WebhookSettings(
        port=9443,
        endpoint=Endpoint(service_namespace="wcow-system", service_name="wcow-webhook"),
        excluded_namespaces=("kube-system", "wcow-system"),
        owner_clusterrole="wcow-webhook",
    )
    served = self_signed(["wcow-webhook.wcow-system.svc"])
    return WebhookKeeper(api, settings, served, lambda: ["hv"])


def test_configurations_belong_to_the_cluster_role_so_uninstall_removes_them() -> None:
    api = OwnedApi(OWNER)
    keeper = _owned_keeper(api)
    assert keeper.sync() == 2
    for kind in ("mutating", "validating"):
        assert api.objects[kind]["metadata"]["ownerReferences"] == [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "name": "wcow-webhook", "uid": "uid-1"}
        ]  # fmt: skip
    assert keeper.published.is_set()
    assert keeper.sync() == 0
    # The ClusterRole recreated (a new uid): the configurations follow it.
    api.owner_ref = OwnerReference(OWNER.api_version, OWNER.kind, OWNER.name, "uid-2")
    assert keeper.sync() == 2


def test_nothing_is_written_while_the_owning_cluster_role_is_missing() -> None:
    """While the owner is missing (deleted by an uninstall, or a ClusterRole name that does not
    exist when the rights come from elsewhere), a configuration written would have no owner to
    be collected with and could outlive the operator, refusing every pod of a wcow class."""
    api = OwnedApi(None)
    keeper = _owned_keeper(api)
    with pytest.raises(OwnerMissingError, match="ClusterRole wcow-webhook"):
        keeper.sync()
    assert api.writes == 0
    assert not keeper.published.is_set()


def test_a_deleted_configuration_is_written_again_within_the_recheck() -> None:
    api = OwnedApi(OWNER)
    keeper = _owned_keeper(api)
    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,), kwargs={"interval": 0.01,
                              "recheck": 0.05})  # fmt: skip
    thread.start()
    try:
        assert keeper.published.wait(5)
        del api.objects["validating"]
        deadline = time.monotonic() + 5
        while "validating" not in api.objects and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "validating" in api.objects
    finally:
        stop.set()
        thread.join()


def test_with_cert_manager_the_keeper_leaves_the_ca_bundle_to_the_cainjector() -> None:
    api = FakeApi()
    served = self_signed(["wcow-webhook.wcow-system.svc"])
    settings = WebhookSettings(
        port=9443,
        endpoint=Endpoint(service_namespace="wcow-system", service_name="wcow-webhook"),
        excluded_namespaces=("wcow-system",),
        ca_injection_from="wcow-system/wcow-webhook",
    )
    classes = ["hv"]
    keeper = WebhookKeeper(api, settings, served, lambda: classes)
    keeper.sync()
    hook = api.objects["mutating"]["webhooks"][0]
    assert "caBundle" not in hook["clientConfig"]
    assert api.objects["mutating"]["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "wcow-system/wcow-webhook"
    }
    injected = base64.b64encode(served.ca_pem.encode()).decode()
    hook["clientConfig"]["caBundle"] = injected  # what the cainjector writes
    classes.append("proc")
    assert keeper.sync() == 2
    assert api.objects["mutating"]["webhooks"][0]["clientConfig"]["caBundle"] == injected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--webhook-ca-injection-from", "wcow-webhook"], "needs --webhook-cert-dir"),
        (["--webhook-cert-dir", "/tls", "--webhook-ca-injection-from", "a/b/c"], "NAME or"),
        (["--webhook-owner-clusterrole", "Not_A_Name"], "not a valid name"),
    ],
)
def test_webhook_settings_refuse_what_cannot_work(args: list[str], message: str) -> None:
    base = ["--namespace", "wcow-system", "--webhook-port", "9443", "--webhook-service", "svc"]
    with pytest.raises(SettingsError, match=message):
        parse_settings([*base, *args], {})


def test_a_certificate_name_alone_is_looked_up_in_the_operators_namespace() -> None:
    settings = parse_settings(
        ["--webhook-port", "9443", "--webhook-service", "svc", "--webhook-cert-dir", "/tls",
         "--webhook-ca-injection-from", "wcow-webhook"],
        {"POD_NAMESPACE": "platform"},
    )  # fmt: skip
    assert settings.webhook_ca_injection_from == "platform/wcow-webhook"


def test_before_the_profiles_are_read_the_webhook_refuses_rather_than_admit_unchecked() -> None:
    import asyncio

    import kopf
    from prometheus_client import CollectorRegistry

    from wcow_operator.webhook.metrics import AdmissionMetrics
    from wcow_operator.webhook.server import register

    registry = kopf.OperatorRegistry()
    synced = False
    metrics = AdmissionMetrics(CollectorRegistry())
    register(registry, dict, metrics, synced=lambda: synced)
    handlers = {h.id: h.fn for h in registry._webhooks.get_all_handlers()}
    pod = {"metadata": {"name": "p"}, "spec": {"runtimeClassName": "hv", "containers": []}}
    for handler_id, fn in handlers.items():
        with pytest.raises(kopf.AdmissionError, match="OperatorNotReady") as caught:
            asyncio.run(fn(body=pod, patch=kopf.Patch()))
        assert caught.value.code == 503, handler_id
    assert metrics.refused.labels(reason="OperatorNotReady")._value.get() == 2
    synced = True
    for fn in handlers.values():
        asyncio.run(fn(body=pod, patch=kopf.Patch()))  # no profile for "hv": admitted as is


def test_a_profile_turned_invalid_is_judged_by_its_last_valid_spec() -> None:
    """Like its RuntimeClass and plan entry, which keep their last good state."""
    from wcow_operator.webhook.profile_index import ProfileIndex

    def body(version: str, **vm: Any) -> dict[str, Any]:
        return {
            "apiVersion": "runtime.wcow.dev/v1alpha1",
            "kind": "WindowsRuntimeProfile",
            "metadata": {"name": "hv", "uid": "u-1", "resourceVersion": version},
            "spec": {"isolation": "HyperV", "windowsBuild": "ltsc2022", "vm": vm},
        }

    stored = [body("1", maxProcessorCount=4)]
    index = ProfileIndex(lambda: stored)
    assert index.current()["hv"].spec.vm.max_processor_count == 4  # type: ignore[union-attr]
    stored[0] = body("2", maxProcessorCount=0)  # refused by the model
    assert index.current()["hv"].spec.vm.max_processor_count == 4  # type: ignore[union-attr]
    stored[0] = body("3", maxProcessorCount=6)
    assert index.current()["hv"].spec.vm.max_processor_count == 6  # type: ignore[union-attr]
    # Never valid here (e.g. the operator restarted since): left out.
    assert "hv" not in ProfileIndex(lambda: [body("2", maxProcessorCount=0)]).current()
    # Deleted and created again under the same name: a new uid, no last good spec.
    recreated = body("4", maxProcessorCount=0)
    recreated["metadata"]["uid"] = "u-2"
    stored[0] = recreated
    assert "hv" not in index.current()


def test_with_cert_manager_a_replica_is_published_only_once_the_injected_ca_is_in(
    tmp_path: Path,
) -> None:
    """Readiness (and so the Service) waits for the cainjector: until then the API server
    cannot trust the mounted certificate."""
    mounted = tmp_path / "tls"
    mounted.mkdir()
    authority = Authority("cert-manager")
    served = authority.issue(["wcow-webhook.wcow-system.svc"], mounted)
    (mounted / "ca.crt").write_text(authority.ca_pem, encoding="ascii")
    api = FakeApi()
    settings = WebhookSettings(
        port=9443,
        endpoint=Endpoint(service_namespace="wcow-system", service_name="wcow-webhook"),
        excluded_namespaces=("wcow-system",),
        cert_dir=mounted,
        ca_injection_from="wcow-system/wcow-webhook",
    )
    keeper = WebhookKeeper(api, settings, served, lambda: ["hv"])
    keeper.sync()
    assert not keeper.published.is_set()
    injected = base64.b64encode(authority.ca_pem.encode()).decode()
    api.objects["mutating"]["webhooks"][0]["clientConfig"]["caBundle"] = injected
    keeper.sync()
    assert not keeper.published.is_set()  # the validating one still has none
    api.objects["validating"]["webhooks"][0]["clientConfig"]["caBundle"] = injected
    keeper.sync()
    assert keeper.published.is_set()
    # cert-manager renews the CA: not trusted again until the cainjector catches up
    (mounted / "ca.crt").write_text(Authority("renewed").ca_pem, encoding="ascii")
    keeper.sync()
    assert not keeper.published.is_set()


class FlakyApi(FakeApi):
    """An API server that drops the connection, then fails in a way nobody foresaw."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[Exception] = [
            urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused"),  # type: ignore[arg-type]
            RuntimeError("something unforeseen"),
        ]

    def read(self, kind: str) -> dict[str, Any] | None:
        if self.failures:
            raise self.failures.pop(0)
        return super().read(kind)


def test_the_keeper_outlives_a_dropped_connection_and_an_unforeseen_error() -> None:
    api = FlakyApi()
    settings = WebhookSettings(
        port=9443, endpoint=Endpoint(url="https://127.0.0.1:9443"), excluded_namespaces=("x",)
    )
    keeper = WebhookKeeper(api, settings, self_signed(["127.0.0.1"]), lambda: ["hv"])
    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,), kwargs={"interval": 0.01})
    thread.start()
    try:
        assert keeper.published.wait(5)
        assert set(api.objects) == {"mutating", "validating"}
    finally:
        stop.set()
        thread.join()
