"""``wcow-operator``: wires settings, the Kubernetes adapter, the watch-fed cache, the
controller, leader election, metrics and probes together; kopf hosts the process (login,
signals) and its admission handlers."""

from __future__ import annotations

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
from typing import Any

import kopf
import prometheus_client

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
    configure_server,
    serving_certificate,
)
from wcow_operator.handlers.admission import register as register_admission
from wcow_operator.handlers.certificates import Authority, ServingCertificate, keep_renewed
from wcow_operator.health import serve_health
from wcow_operator.k8s.api import KubernetesApi, load_client_config
from wcow_operator.k8s.leader import run_with_leader_election
from wcow_operator.k8s.webhooks import WebhookConfigurations
from wcow_operator.rbac import OPERATOR_LEASE
from wcow_operator.reconcile.core import ReconcileSettings
from wcow_operator.render.webhooks import Endpoint
from wcow_operator.settings import OperatorSettings, SettingsError, parse_settings

log = logging.getLogger("wcow_operator")


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


def in_background(name: str, target: Callable[..., object], *args: object) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


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


def start_admission_webhook(
    registry: kopf.OperatorRegistry,
    *,
    webhook: WebhookSettings,
    served: tuple[ServingCertificate, Authority | None],
    cache: ClusterCache,
    metrics: Metrics,
    api_client: Any,
    stop: threading.Event,
) -> WebhookKeeper:
    """kopf serves the pod admission handlers; a thread keeps the webhook configurations."""
    certificate, authority = served
    if authority is not None:
        in_background(
            "webhook-certificate", keep_renewed, authority, webhook.hosts, certificate, stop
        )
    index = ProfileIndex(cache.profile_bodies)
    register_admission(
        registry, index.current, AdmissionMetrics(metrics.registry), synced=cache.synced
    )
    configure_server(registry, webhook, certificate)
    keeper = WebhookKeeper(WebhookConfigurations(api_client), webhook, certificate, index.classes)

    def keep() -> None:
        while not cache.synced() and not stop.wait(0.2):
            pass  # never publish "no classes" before the profiles are known
        keeper.run(stop)

    in_background("webhook-configurations", keep)
    return keeper


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(argv)
        webhook = webhook_settings(settings) if settings.webhook_port else None
        served = serving_certificate(webhook) if webhook is not None else None
    except (SettingsError, CertificateMissingError) as error:
        print(f"wcow-operator: {error}", file=sys.stderr)
        return 2
    configure_logging(settings)

    metrics = Metrics()
    prometheus_client.start_http_server(settings.metrics_port, registry=metrics.registry)
    api_client = load_client_config()
    api = KubernetesApi(
        api_client,
        on_error=lambda verb, resource, code: metrics.api_errors.labels(
            verb=verb, resource=resource, code=str(code)
        ).inc(),
        on_write=lambda verb, resource: metrics.api_writes.labels(
            verb=verb, resource=resource
        ).inc(),
    )
    identity = pod_identity()
    cache = ClusterCache()
    controller = Controller(
        api,
        cache,
        ReconcileSettings(
            namespace=settings.namespace,
            require_node_gating=settings.require_node_gating,
            max_unavailable=settings.max_unavailable,
            rollout_timeout=timedelta(seconds=settings.rollout_timeout_seconds),
        ),
        metrics,
        workers=settings.workers,
        instance=identity,
    )
    runner = Runner(controller, settings.resync_seconds, settings.debounce_seconds)
    cache.on_change = runner.trigger
    stop = threading.Event()
    leading = threading.Event()

    reconciled = threading.Event()  # the reconciler has finished its last pass

    def lead() -> None:
        leading.set()
        metrics.leader.set(1)
        log.info("reconciling as %s", identity)
        try:
            runner.run(stop)
        finally:
            reconciled.set()

    registry = new_registry()
    keeper = (
        start_admission_webhook(
            registry,
            webhook=webhook,
            served=served,
            cache=cache,
            metrics=metrics,
            api_client=api_client,
            stop=stop,
        )
        if webhook is not None and served is not None
        else None
    )

    probes = Probes(runner, leading, keeper, settings.resync_seconds)
    serve_health(settings.health_port, probes.live, probes.ready)
    if settings.leader_election:
        in_background(
            "leader-election", run_with_leader_election, OPERATOR_LEASE, settings.namespace,
            identity, lead,
        )  # fmt: skip
    else:
        in_background("reconciler", lead)

    start_informers(api, cache, settings.namespace, metrics, stop)
    log.info("wcow-operator starting: namespace=%s", settings.namespace)
    stopped_by_signal = True
    try:
        if keeper is None:
            kopf.run(registry=registry, standalone=True, clusterwide=True)
        else:
            stopped_by_signal = serve_draining(
                registry, probes.draining, settings.shutdown_delay_seconds
            )
    finally:
        stop.set()
        runner.trigger()
        if leading.is_set():
            reconciled.wait(timeout=10)  # let a pass in flight finish its writes
    return 0 if stopped_by_signal else 1


def new_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    # A registry of our own has no login handler: use the kubernetes client's credentials
    # (in-cluster service account, or the kubeconfig), as the default registry would.
    kopf.on.login(registry=registry)(kopf.login_via_client)
    return registry


def start_informers(
    api: KubernetesApi, cache: ClusterCache, namespace: str, metrics: Metrics,
    stop: threading.Event,
) -> None:  # fmt: skip
    """Every replica keeps its cache warm, so a new leader plans from memory at once."""
    for watched in watched_collections(namespace):
        threading.Thread(
            target=run_informer,
            args=(api, watched, cache, stop),
            kwargs={"on_list": lambda kind: metrics.watch_lists.labels(kind=kind).inc()},
            name=f"watch-{watched.kind}",
            daemon=True,
        ).start()


@dataclass
class Probes:
    """/healthz and /readyz."""

    runner: Runner
    leading: threading.Event
    keeper: WebhookKeeper | None
    resync_seconds: float
    draining: threading.Event = field(default_factory=threading.Event)

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
        if not self.leading.is_set():
            return True, "standby"
        ok = self.runner.last_pass_ok is not None
        return ok, "ok" if ok else "no successful reconcile yet"


class _NotInMainThread(logging.Filter):
    """kopf warns that it ignores OS signals when not in the main thread: here that is the
    point (serve_draining handles them), so the warning would only mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not in the main thread" not in record.getMessage()


def serve_draining(
    registry: kopf.OperatorRegistry, draining: threading.Event, delay: float
) -> bool:
    """kopf (and so the webhook server) in a thread of its own. On SIGTERM or SIGINT this
    replica reports not ready and keeps answering admissions for ``delay`` seconds, so the
    Service's endpoints drop it before it stops: the API server does not retry a webhook call
    that fails, and for the wcow classes a failed call refuses the pod. A second signal ends
    the wait. False if kopf stopped on its own (a failure: it logged why)."""
    stop_kopf = threading.Event()
    terminated = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: terminated.set())
    logging.getLogger("kopf._core.reactor.running").addFilter(_NotInMainThread())
    thread = threading.Thread(
        target=kopf.run,
        kwargs={"registry": registry, "standalone": True, "clusterwide": True,
                "stop_flag": stop_kopf},
        name="kopf",
        daemon=True,
    )  # fmt: skip
    thread.start()
    while not terminated.wait(0.5):
        if not thread.is_alive():
            log.error("kopf stopped on its own (see above): exiting")
            return False
    draining.set()
    log.info("terminating: not ready, answering admissions for %.0f s more", delay)
    terminated.clear()
    terminated.wait(delay)
    stop_kopf.set()
    thread.join(timeout=30)
    return True


if __name__ == "__main__":
    raise SystemExit(main())
