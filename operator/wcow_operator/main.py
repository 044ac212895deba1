"""``wcow-operator``: wires settings, the Kubernetes adapter, the watch-fed cache, the
controller, leader election, the admission webhook, metrics and probes together, and hands
every long-lived thread to one ``Supervisor`` (docs/architecture.md, Concurrency: threads,
with kopf's event loop in one of them for the webhook only). The main thread waits for a signal."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import prometheus_client

from wcow_operator import uninstall
from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.controller import Controller, Runner
from wcow_operator.controller.informer import run_informer, watched_collections
from wcow_operator.controller.metrics import Metrics
from wcow_operator.handlers.admission import (
    AdmissionMetrics,
    CertificateMissingError,
    ProfileIndex,
    WebhookKeeper,
    WebhookSettings,
    serving_certificate,
)
from wcow_operator.handlers.certificates import Authority, ServingCertificate, keep_renewed
from wcow_operator.handlers.webhook_server import STOP_SECONDS, AdmissionServer
from wcow_operator.k8s.api import KubernetesApi, load_client_config
from wcow_operator.k8s.leader import LeaseElection
from wcow_operator.k8s.secrets import RegistrySecret
from wcow_operator.k8s.webhooks import WebhookConfigurations
from wcow_operator.rbac import OPERATOR_LEASE
from wcow_operator.reconcile.core import ReconcileSettings
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.credentials import scoped_credentials
from wcow_operator.registry.resolver import ImageAdmission, Resolver
from wcow_operator.render.webhooks import Endpoint
from wcow_operator.settings import OperatorSettings, SettingsError, parse_settings
from wcow_support.health import HealthServer
from wcow_support.supervisor import Supervisor

log = logging.getLogger("wcow_operator")

LAST_PASS_SECONDS = 10.0  # at shutdown, a pass in flight may finish its writes this long


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(settings: OperatorSettings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    logging.getLogger("kopf").setLevel(max(logging.INFO, logging.getLevelName(settings.log_level)))


def pod_identity() -> str:
    """This replica's name: the leader-election identity and its webhook CA's name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def webhook_settings(settings: OperatorSettings) -> WebhookSettings:
    if settings.webhook_url:
        endpoint = Endpoint(url=settings.webhook_url)
        hosts: tuple[str, ...] = (urllib.parse.urlsplit(settings.webhook_url).hostname or "",)
    else:
        service, namespace = settings.webhook_service, settings.namespace
        endpoint = Endpoint(service_namespace=namespace, service_name=service)
        hosts = (f"{service}.{namespace}.svc", f"{service}.{namespace}", service)
    return WebhookSettings(
        port=settings.webhook_port,
        endpoint=endpoint,
        excluded_namespaces=("kube-system", settings.namespace),
        cert_dir=Path(settings.webhook_cert_dir) if settings.webhook_cert_dir else None,
        ca_injection_from=settings.webhook_ca_injection_from or None,
        owner_clusterrole=settings.webhook_owner_clusterrole or None,
        hosts=hosts,
        identity=pod_identity(),
        listen="127.0.0.1" if settings.webhook_url else "0.0.0.0",  # noqa: S104 - via Service
    )


@dataclass
class Probes:
    """/healthz and /readyz."""

    runner: Runner
    leading: threading.Event
    keeper: WebhookKeeper | None
    resync_seconds: float
    draining: threading.Event = field(default_factory=threading.Event)
    webhook_port: int | None = None  # with the webhook: ready only once it accepts calls

    def live(self) -> tuple[bool, str]:
        # A reconciler stuck for several resync periods is not alive; standby replicas are.
        stuck = self.leading.is_set() and time.monotonic() - self.runner.heartbeat > max(
            3 * self.resync_seconds, 120
        )
        return (not stuck, "stuck" if stuck else "ok")

    def ready(self) -> tuple[bool, str]:
        if self.draining.is_set():
            return False, "shutting down"
        # Every replica serves the webhook: the Service may send it a pod only once it knows
        # the profiles and the API server trusts its certificate.
        if self.keeper is not None and not self.keeper.published.is_set():
            return False, "the API server does not trust this replica's webhook certificate yet"
        if self.webhook_port is not None and not accepts(self.webhook_port):
            # kopf listens only once it has logged in and started: a Service sending calls
            # here before that gets them refused, and the API server refuses the pods.
            return False, "the webhook server does not accept connections yet"
        if not self.leading.is_set():
            return True, "standby"
        ok = self.runner.last_pass_ok is not None
        return ok, "ok" if ok else "no successful reconcile yet"


def accepts(port: int) -> bool:
    """Something accepts TCP connections on this host's ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Webhook:
    settings: WebhookSettings
    certificate: ServingCertificate
    authority: Authority | None  # None: cert-manager renews the certificate


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run until a signal; exit 0 then, 1 if a part failed, 2 for bad settings."""
    code = run(argv)
    # The threads left (watches, the Lease renewal) are daemons blocked in reads. Letting the
    # interpreter finalize around them can abort it (a thread woken inside the kubernetes
    # client's pydantic-validated calls cannot be unwound), so end here, logs flushed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["uninstall"]:  # the chart's pre-delete hook (wcow_operator.uninstall)
        return uninstall.main(args[1:])
    try:
        settings = parse_settings(argv)
        webhook = None
        if settings.webhook_port:
            config = webhook_settings(settings)
            webhook = Webhook(config, *serving_certificate(config))
    except (SettingsError, CertificateMissingError) as error:
        print(f"wcow-operator: {error}", file=sys.stderr)
        return 2
    configure_logging(settings)
    terminated = termination_signals()
    supervisor = Supervisor()
    try:
        probes = start(settings, webhook, supervisor)
        log.info("wcow-operator starting: namespace=%s", settings.namespace)
        if not supervisor.wait(terminated):
            return 1
        probes.draining.set()
        if webhook is not None:
            drain(terminated, settings.shutdown_delay_seconds)
        return 0
    finally:
        supervisor.shutdown()


def termination_signals() -> threading.Event:
    """Set on SIGTERM or SIGINT (also a second time: ``drain`` clears it)."""
    terminated = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: terminated.set())
    return terminated


def drain(terminated: threading.Event, delay: float) -> None:
    """Not ready already, keep answering admissions for ``delay`` seconds, so the Service's
    endpoints drop this replica before it stops: the API server does not retry a webhook call
    that fails, and for the wcow classes a failed call refuses the pod. A second signal ends
    the wait."""
    log.info("terminating: not ready, answering admissions for %.0f s more", delay)
    terminated.clear()
    terminated.wait(delay)


def start(settings: OperatorSettings, webhook: Webhook | None, supervisor: Supervisor) -> Probes:
    """Start every part, each in threads of ``supervisor``'s, in an order whose reverse
    stops them well: the webhook before the reconciler, the reconciler before the watches
    that feed it, the probes last. The probes, to answer and to drain."""
    metrics = Metrics()
    _, metrics_thread = prometheus_client.start_http_server(
        settings.metrics_port, registry=metrics.registry
    )
    serve_http("metrics", supervisor, metrics_thread)
    api_client = load_client_config()
    api = kubernetes_api(api_client, metrics)
    cache = ClusterCache()
    identity = pod_identity()
    controller = Controller(
        api, cache, reconcile_settings(settings), metrics, workers=settings.workers,
        instance=identity,
    )  # fmt: skip
    runner = Runner(controller, settings.resync_seconds, settings.debounce_seconds)
    cache.on_change = runner.trigger
    cache.on_report = runner.reported
    draining = threading.Event()  # the replica terminates: unready, admissions close
    admission = (
        admission_parts(webhook, api_client, cache, metrics, settings, draining=draining)
        if webhook
        else None
    )
    keeper = admission.keeper if admission is not None else None
    probes = Probes(
        runner, threading.Event(), keeper, settings.resync_seconds, draining,
        webhook.settings.port if webhook else None,
    )  # fmt: skip
    health = HealthServer(settings.health_port, probes.live, probes.ready)
    health.start()
    serve_http("health", supervisor, health.thread)
    start_informers(supervisor, api, cache, settings.namespace, metrics)
    if admission is not None:
        start_webhook_keeping(supervisor, admission, cache)
        if admission.secret is not None:
            supervisor.start("registry-secret", admission.secret.run(supervisor.stopping))
    elected = start_election(supervisor, settings, identity)
    reconciler = Reconciler(runner, elected, probes.leading, supervisor.stopping)
    supervisor.start("reconciler", reconciler.run, stop=reconciler.stop, grace=LAST_PASS_SECONDS)
    if admission is not None:
        server = admission.server
        supervisor.start("kopf", server.run, stop=server.stop, grace=STOP_SECONDS)
    return probes


def serve_http(name: str, supervisor: Supervisor, thread: threading.Thread) -> None:
    """An HTTP server's thread (metrics, probes): never stopped, it answers until the process
    ends, so the kubelet sees this replica unready but alive while it shuts down."""
    thread.name = name
    supervisor.adopt(thread, stop=lambda: None)


def kubernetes_api(api_client: Any, metrics: Metrics) -> KubernetesApi:
    return KubernetesApi(
        api_client,
        on_error=lambda verb, resource, code: metrics.api_errors.labels(
            verb=verb, resource=resource, code=str(code)
        ).inc(),
        on_write=lambda verb, resource: metrics.api_writes.labels(
            verb=verb, resource=resource
        ).inc(),
    )


def reconcile_settings(settings: OperatorSettings) -> ReconcileSettings:
    return ReconcileSettings(
        namespace=settings.namespace,
        require_node_gating=settings.require_node_gating,
        max_unavailable=settings.max_unavailable,
        rollout_timeout=timedelta(seconds=settings.rollout_timeout_seconds),
        drain=settings.drain,
    )


def start_informers(
    supervisor: Supervisor, api: KubernetesApi, cache: ClusterCache, namespace: str,
    metrics: Metrics,
) -> None:  # fmt: skip
    """Every replica keeps its cache warm, so a new leader plans from memory at once. A
    watch blocked in its read is not waited for at shutdown."""
    for watched in watched_collections(namespace):
        informer = functools.partial(
            run_informer, api, watched, cache, supervisor.stopping,
            on_list=lambda kind: metrics.watch_lists.labels(kind=kind).inc(),
        )  # fmt: skip
        supervisor.start(f"watch-{watched.kind}", informer)


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
    """Renew this replica's own serving certificate, and keep the webhook configurations."""
    stop, webhook = supervisor.stopping, admission.webhook
    if webhook.authority is not None:
        authority, hosts, first = webhook.authority, webhook.settings.hosts, webhook.certificate
        supervisor.start("webhook-certificate", lambda: keep_renewed(authority, hosts, first, stop))

    def keep() -> None:
        while not cache.synced() and not stop.wait(0.2):
            pass  # never publish "no classes" before the profiles are known
        admission.keeper.run(stop)

    supervisor.start("webhook-configurations", keep)


def start_election(
    supervisor: Supervisor, settings: OperatorSettings, identity: str
) -> threading.Event:
    """Set once this replica may reconcile: at once without leader election."""
    if not settings.leader_election:
        elected = threading.Event()
        elected.set()
        return elected
    election = LeaseElection(OPERATOR_LEASE, settings.namespace, identity)
    supervisor.start("lease-watchdog", election.watchdog)
    supervisor.start("leader-election", election.compete)
    return election.leading


@dataclass(frozen=True)
class Reconciler:
    """The reconcile loop's thread: waits for the Lease (no wait without leader election),
    then runs passes until stopped; a pass in flight finishes its writes."""

    runner: Runner
    elected: threading.Event
    leading: threading.Event  # what the probes read: this replica reconciles
    stopping: threading.Event

    def run(self) -> None:
        while not self.elected.wait(0.2):
            if self.stopping.is_set():
                return
        self.leading.set()
        controller = self.runner.controller
        controller.metrics.leader.set(1)
        log.info("reconciling as %s", controller.instance)
        try:
            self.runner.run(self.stopping)
        finally:
            controller.close()

    def stop(self) -> None:
        self.stopping.set()
        self.runner.trigger()  # wake it from its wait for the next pass


if __name__ == "__main__":
    main()
