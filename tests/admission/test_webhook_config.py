"""The webhook configurations (render.webhooks), the keeper that writes them, their RBAC."""

from __future__ import annotations

import base64
from typing import Any

from wcow_operator import rbac
from wcow_operator.handlers.admission import WebhookKeeper, WebhookSettings
from wcow_operator.handlers.certificates import ServingCertificate, self_signed
from wcow_operator.k8s.webhooks import PERMISSIONS
from wcow_operator.render.webhooks import (
    MAX_CAS,
    Endpoint,
    match_condition,
    merged_ca_bundle,
    webhook_configuration,
)


def test_every_webhook_call_is_granted_and_only_by_name() -> None:
    for permissions in PERMISSIONS.values():
        for group, resource, verb, _scope, name in permissions:
            assert rbac.allows(rbac.OPERATOR_CLUSTER_RULES, group, resource, verb, name)
            if name is not None:
                assert not rbac.allows(rbac.OPERATOR_CLUSTER_RULES, group, resource, verb, "x")


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


def _pem() -> str:
    return self_signed(["localhost"]).ca_pem


def test_ca_bundle_keeps_other_replicas_cas_up_to_a_limit() -> None:
    first, second = _pem(), _pem()
    bundle = merged_ca_bundle(merged_ca_bundle(None, first), second)
    text = base64.b64decode(bundle).decode()
    assert text.index(second.strip()) < text.index(first.strip())
    assert merged_ca_bundle(bundle, second) == bundle  # nothing new: the same bytes
    for _ in range(MAX_CAS + 2):
        bundle = merged_ca_bundle(bundle, _pem())
    assert base64.b64decode(bundle).decode().count("BEGIN CERTIFICATE") == MAX_CAS


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
