"""kopf's event loop in a thread of its own, serving the pod admission webhook: the one
asynchronous part of the operator, behind ``run`` and ``stop`` (docs/architecture.md, Concurrency).

kopf is here for its webhook server: TLS with certificates reread from disk, AdmissionReview
in and out, handler errors as refusals, body changes as a JSON patch. Nothing else of kopf
runs: no watches (the controller has its own informers), no resource scanning after the
start (pods are a core resource), no peering. Its API client (aiohttp) logs in with the
kubernetes client's credentials and discovers the resources once at start, which its webhook
needs to route a request to its handler; without a webhook kopf is not started at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import aiohttp.web
import kopf

from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.handlers.admission import AdmissionMetrics, WebhookSettings, register
from wcow_operator.handlers.certificates import ServingCertificate
from wcow_operator.registry.resolver import ImageAdmission

STOP_SECONDS = 30.0  # kopf's own shutdown: finish the admissions in flight, close the server


class AdmissionServer:
    def __init__(
        self,
        settings: WebhookSettings,
        certificate: ServingCertificate,
        profiles: Callable[[], dict[str, WindowsRuntimeProfile]],
        metrics: AdmissionMetrics,
        synced: Callable[[], bool],
        *,
        draining: threading.Event,
        images: ImageAdmission | None = None,
    ) -> None:
        """``draining``: set when the replica terminates (see ``ClosingWhenDraining``)."""
        self._registry = kopf.OperatorRegistry()
        # A registry of our own has no login handler: use the kubernetes client's credentials
        # (in-cluster service account, or the kubeconfig), as the default registry would.
        kopf.on.login(registry=self._registry)(kopf.login_via_client)
        register(self._registry, profiles, metrics, synced=synced, images=images)
        _serve_on(self._registry, settings, certificate, draining)
        self._stop = threading.Event()

    def run(self) -> None:
        """Serve until ``stop``; returns early only if kopf fails (it logs why)."""
        logging.getLogger("kopf._core.reactor.running").addFilter(_NotInMainThread())
        kopf.run(registry=self._registry, standalone=True, clusterwide=True, stop_flag=self._stop)

    def stop(self) -> None:
        self._stop.set()


def _serve_on(
    registry: kopf.OperatorRegistry,
    settings: WebhookSettings,
    certificate: ServingCertificate,
    draining: threading.Event,
) -> None:
    """Let kopf serve the handlers on ``settings.port`` with ``certificate``."""

    @kopf.on.startup(registry=registry)
    def admission_server(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = ClosingWhenDraining(
            draining,
            addr=listen,
            port=port,
            certfile=str(certificate.certfile),
            pkeyfile=str(certificate.keyfile),
            cadata=certificate.ca_pem.encode("ascii") or None,
        )
        settings.admission.managed = None  # WebhookKeeper writes the configurations
        settings.scanning.disabled = True  # no CRD watch: only pods (core) are served

    listen, port = settings.listen, settings.port


class ClosingWhenDraining(kopf.WebhookServer):
    """kopf's webhook server, whose answers close their connection once ``draining`` is set.

    The API server keeps its connections to a webhook open between calls (HTTP/1.1
    keep-alive), and a Service's endpoints steer only new connections: after the endpoints
    dropped a terminating replica, the API server would go on calling it over the connections
    it holds, and one whose call meets the replica's stop fails the call, so the pod is
    refused (a POST is not retried: k8s.io/client-go rest and net/http retry only requests
    that wrote nothing). ``Connection: close`` on every answer while draining makes the API
    server open its next connection through the Service, to a replica that stays, as
    kube-apiserver itself does while it shuts down (``--shutdown-send-retry-after``)."""

    def __init__(self, draining: threading.Event, **options: Any) -> None:
        super().__init__(**options)
        self.draining = draining

    async def _serve(  # type: ignore[override]  # kopf's is a staticmethod: same call
        self, fn: Any, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        try:
            response = await kopf.WebhookServer._serve(fn, request)
        except aiohttp.web.HTTPException as error:
            if self.draining.is_set():
                error.headers["Connection"] = "close"
            raise
        if self.draining.is_set():
            response.force_close()
        return response


class _NotInMainThread(logging.Filter):
    """kopf warns that it ignores OS signals when not in the main thread: here that is the
    point (the main thread handles them), so the warning would only mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not in the main thread" not in record.getMessage()
