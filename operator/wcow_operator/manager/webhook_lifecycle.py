"""The admission webhook's long-lived parts: kopf's server, the keeper of the webhook
configurations, the renewal of this replica's own serving certificate, the registry
credentials of the image checks, and the answers it still gives while the replica stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.metrics import Metrics
from wcow_operator.k8s.secrets import RegistrySecret
from wcow_operator.k8s.webhook_configurations import WebhookConfigurations
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.credentials import scoped_credentials
from wcow_operator.registry.resolver import Resolver
from wcow_operator.settings import OperatorSettings
from wcow_operator.webhook.certificates import Authority, ServingCertificate, keep_renewed
from wcow_operator.webhook.configurations import WebhookKeeper
from wcow_operator.webhook.image_admission import ImageAdmission
from wcow_operator.webhook.metrics import AdmissionMetrics
from wcow_operator.webhook.profile_index import ProfileIndex
from wcow_operator.webhook.server import STOP_SECONDS, AdmissionServer
from wcow_operator.webhook.serving import WebhookSettings
from wcow_support.supervisor import Supervisor

log = logging.getLogger("wcow_operator")


@dataclass(frozen=True)
class Webhook:
    settings: WebhookSettings
    certificate: ServingCertificate
    authority: Authority | None  # None: cert-manager renews the certificate


@dataclass(frozen=True)
class Admission:
    """The webhook's parts: the keeper of its configurations and kopf's server."""

    webhook: Webhook
    keeper: WebhookKeeper
    server: AdmissionServer
    secret: CredentialsKeeper | None = None  # image checks with a registry Secret


def admission_parts(
    webhook: Webhook, api_client: Any, cache: ClusterCache, metrics: Metrics,
    settings: OperatorSettings, *, draining: threading.Event,
) -> Admission:  # fmt: skip
    index = ProfileIndex(cache.profile_bodies)
    configurations = WebhookConfigurations(api_client)
    keeper = WebhookKeeper(configurations, webhook.settings, webhook.certificate, index.classes)
    admission_metrics = AdmissionMetrics(metrics.registry)
    images, secret = image_checks(settings, api_client, admission_metrics)
    server = AdmissionServer(
        webhook.settings, webhook.certificate, index.current,
        admission_metrics, synced=cache.synced, draining=draining, images=images,
    )  # fmt: skip
    return Admission(webhook, keeper, server, secret)


@dataclass
class CredentialsKeeper:
    """Rereads the registry Secret every ``every`` seconds into the client (rotation)."""

    secret: RegistrySecret
    client: RegistryClient
    every: float = 60.0
    _problems: list[str] = field(default_factory=list)

    def refresh(self) -> None:
        document, scopes = self.secret.read()
        found, problems = scoped_credentials(document or {}, scopes)
        if problems != self._problems:  # said once, not at every reread
            for problem in problems:
                log.warning("registry Secret %s: %s", self.secret.name, problem)
            self._problems = problems
        self.client.credentials = found

    def run(self, stop: threading.Event) -> Callable[[], None]:
        def loop() -> None:
            while not stop.wait(self.every):
                self.refresh()

        return loop


def image_checks(
    settings: OperatorSettings, api_client: Any, metrics: AdmissionMetrics
) -> tuple[ImageAdmission | None, CredentialsKeeper | None]:
    """The image checks, None unless --resolve-images (the webhook decides sizing only)."""
    images = settings.images
    if not images.resolve:
        return None, None
    client = RegistryClient(
        insecure=frozenset(images.insecure_registries),
        allowed=images.allowed_registries,
        ca_file=images.registry_ca_file or None,
    )
    keeper = None
    if images.registry_secret:
        secret = RegistrySecret(api_client, settings.namespace, images.registry_secret)
        keeper = CredentialsKeeper(secret, client)
        keeper.refresh()
    checks = ImageAdmission(
        Resolver(client, timeout=images.lookup_timeout_seconds),
        refuse_unresolved=images.unreachable_registry == "Refuse",
        unchecked=lambda cause: metrics.images_unchecked.labels(cause=cause).inc(),
    )
    log.info(
        "image checks on: registries read over HTTPS%s, %s",
        f" (HTTP: {', '.join(images.insecure_registries)})" if images.insecure_registries else "",
        f"credentials from Secret {images.registry_secret}" if keeper else "anonymously",
    )
    return checks, keeper


def start_webhook_keeping(
    supervisor: Supervisor, admission: Admission, cache: ClusterCache
) -> None:
    """Renew this replica's own serving certificate, keep the webhook configurations, and
    reread the registry credentials of the image checks."""
    stop, webhook = supervisor.stopping, admission.webhook
    if webhook.authority is not None:
        authority, hosts, first = webhook.authority, webhook.settings.hosts, webhook.certificate
        supervisor.start("webhook-certificate", lambda: keep_renewed(authority, hosts, first, stop))

    def keep() -> None:
        while not cache.synced() and not stop.wait(0.2):
            pass  # never publish "no classes" before the profiles are known
        admission.keeper.run(stop)

    supervisor.start("webhook-configurations", keep)
    if admission.secret is not None:
        supervisor.start("registry-secret", admission.secret.run(stop))


def drain_admissions(terminated: threading.Event, delay: float) -> None:
    """Not ready already, keep answering admissions for ``delay`` seconds, so the Service's
    endpoints drop this replica before it stops: the API server does not retry a webhook call
    that fails, and for the wcow classes a failed call refuses the pod. A second signal ends
    the wait."""
    log.info("terminating: not ready, answering admissions for %.0f s more", delay)
    terminated.clear()
    terminated.wait(delay)


def start_webhook_server(supervisor: Supervisor, admission: Admission) -> None:
    """kopf's server, in the thread that runs its event loop."""
    server = admission.server
    supervisor.start("kopf", server.run, stop=server.stop, grace=STOP_SECONDS)
