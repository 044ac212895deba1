"""``wcow-operator``: wires settings, the Kubernetes adapter, the watch-fed cache and the
controller to the long-lived parts of ``wcow_operator.manager`` (leader election and the
reconcile loop, the watches, the admission webhook, metrics and probes), every thread of them
handed to one ``Supervisor`` (docs/architecture.md, Concurrency: threads, with kopf's event
loop in one of them for the webhook only). The main thread waits for a signal."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import urllib.parse
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from wcow_operator import uninstall_command
from wcow_operator.controller.cache import ClusterCache
from wcow_operator.controller.controller import Controller
from wcow_operator.controller.metrics import Metrics
from wcow_operator.controller.runner import Runner
from wcow_operator.k8s.kubernetes_api import KubernetesApi, load_client_config
from wcow_operator.manager.informers import start_informers
from wcow_operator.manager.probes import Probes, serve_metrics, serve_probes
from wcow_operator.manager.reconcile_loop import start_reconciling
from wcow_operator.manager.webhook_lifecycle import (
    Webhook,
    admission_parts,
    drain_admissions,
    start_webhook_keeping,
    start_webhook_server,
)
from wcow_operator.reconcile.model import ReconcileSettings
from wcow_operator.render.webhooks import Endpoint
from wcow_operator.settings import OperatorSettings, SettingsError, parse_settings
from wcow_operator.webhook.serving import (
    CertificateMissingError,
    WebhookSettings,
    serving_certificate,
)
from wcow_support.supervisor import Supervisor

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
    if args[:1] == ["uninstall"]:  # the chart's pre-delete hook (wcow_operator.uninstall_command)
        return uninstall_command.main(args[1:])
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
            drain_admissions(terminated, settings.shutdown_delay_seconds)
        return 0
    finally:
        supervisor.shutdown()


def termination_signals() -> threading.Event:
    """Set on SIGTERM or SIGINT (also a second time: ``drain_admissions`` clears it)."""
    terminated = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: terminated.set())
    return terminated


def start(settings: OperatorSettings, webhook: Webhook | None, supervisor: Supervisor) -> Probes:
    """Start every part, each in threads of ``supervisor``'s, in an order whose reverse
    stops them well: the webhook before the reconciler, the reconciler before the watches
    that feed it, the probes last. The probes, to answer and to drain."""
    metrics = Metrics()
    serve_metrics(settings.metrics_port, metrics, supervisor)
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
    serve_probes(settings.health_port, probes, supervisor)
    start_informers(supervisor, api, cache, settings.namespace, metrics)
    if admission is not None:
        start_webhook_keeping(supervisor, admission, cache)
    start_reconciling(supervisor, runner, settings, identity, probes.leading)
    if admission is not None:
        start_webhook_server(supervisor, admission)
    return probes


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
        allow_evict=settings.allow_evict,
    )


if __name__ == "__main__":
    main()
