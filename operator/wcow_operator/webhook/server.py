"""kopf's event loop in a thread of its own, serving the pod admission webhook: the one
asynchronous part of the operator, behind ``run`` and ``stop`` (docs/architecture.md, Concurrency).
Its two handlers (``register``) are thin adapters over ``webhook.decide``; each decision
runs in the ``Decider``'s threads.

kopf is here for its webhook server: TLS with certificates reread from disk, AdmissionReview
in and out, handler errors as refusals, body changes as a JSON patch. Nothing else of kopf
runs: no watches (the controller has its own informers), no resource scanning after the
start (pods are a core resource), no peering. Its API client (aiohttp) logs in with the
kubernetes client's credentials and discovers the resources once at start, which its webhook
needs to route a request to its handler; without a webhook kopf is not started at all.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import kopf

from wcow_contract.text import shown
from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.render.webhooks import MUTATE_ID, VALIDATE_ID
from wcow_operator.webhook.certificates import ServingCertificate
from wcow_operator.webhook.decide import admit, admit_update
from wcow_operator.webhook.decider import IMAGE_WORKERS, Decider
from wcow_operator.webhook.decision import (
    NOT_READY,
    TIMED_OUT,
    AdmissionWarning,
    Admitted,
    Decision,
)
from wcow_operator.webhook.image_admission import ImageAdmission
from wcow_operator.webhook.image_decision import IMAGE_UNCHECKED
from wcow_operator.webhook.metrics import AdmissionMetrics
from wcow_operator.webhook.serving import WebhookSettings

log = logging.getLogger(__name__)
INTERNAL_ERROR = "InternalError"
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


def _replace_with(admitted: dict[str, Any]) -> Callable[[kopf.RawBody], None]:
    def apply(body: kopf.RawBody) -> None:
        raw: dict[str, Any] = body  # type: ignore[assignment]
        raw.clear()
        raw.update(copy.deepcopy(admitted))

    return apply


@dataclass(frozen=True)
class _Judge:
    """What both handlers do around the decision: refuse before the profiles are known,
    decide in the decider's threads, count and word the refusals."""

    profiles: Callable[[], dict[str, WindowsRuntimeProfile]]
    metrics: AdmissionMetrics
    synced: Callable[[], bool]
    decisions: Decider
    images: ImageAdmission | None = None

    async def mutate(
        self, body: kopf.Body, patch: kopf.Patch, warnings: list[str], dry_run: bool = False
    ) -> None:
        known = self.known_profiles()
        class_name = (body.get("spec") or {}).get("runtimeClassName")
        if isinstance(class_name, str) and class_name not in known:
            warnings.append(
                f"WindowsRuntimeProfile {shown(class_name)} is not valid and this operator "
                "replica has no earlier valid spec of it: the pod is admitted unchecked "
                "(kubectl describe wrp shows why the profile is invalid)"
            )
        if self.images is not None:
            decision = await self.decided(self.images.admit, dict(body), known, dry_run)
        else:
            decision = await self.decided(admit, dict(body), known)
        # Only the images' warnings here: the validating webhook does not read images at
        # CREATE, and returns the sizing warnings itself (where the pod is final), so the
        # client sees each warning once.
        self._tell(warnings, [w for w in decision.warnings if w.reason == IMAGE_UNCHECKED])
        if decision.profile is not None:
            self.metrics.admitted.inc()
        if decision.mutated:
            self.metrics.mutated.inc()
            patch.fns.append(_replace_with(decision.pod))

    async def validate(
        self, body: kopf.Body, old: kopf.Body | None, warnings: list[str], dry_run: bool = False
    ) -> None:
        """CREATE (``old`` None): the final pod, after every mutating webhook: refused if it
        would be refused now (e.g. another webhook raised its limits past the bounds after
        ours sized it). UPDATE: what hcsshim reads is fixed at creation
        (webhook.decide.admit_update). The decision's warnings are returned here, where
        the pod is final, so the client sees each once."""
        known = self.known_profiles()
        if old is not None and self.images is not None:
            judged = self.images.admit_update
            decision = await self.decided(judged, dict(old), dict(body), known, dry_run)
        elif old is not None:
            decision = await self.decided(admit_update, dict(old), dict(body), known)
        else:
            decision = await self.decided(admit, dict(body), known)
        self._tell(warnings, decision.warnings)

    def _tell(self, warnings: list[str], found: Iterable[AdmissionWarning]) -> None:
        """Count each warning and hand it to kopf, which returns it to the client."""
        for warning in found:
            self.metrics.warned.labels(reason=warning.reason).inc()
            warnings.append(str(warning))

    def known_profiles(self) -> dict[str, WindowsRuntimeProfile]:
        if not self.synced():
            self.metrics.refused.labels(reason=NOT_READY).inc()
            raise kopf.AdmissionError(
                f"{NOT_READY}: the wcow-runtime operator has not read the profiles yet; "
                "retry in a few seconds",
                code=503,
            )
        return self.profiles()

    async def decided(self, fn: Callable[..., Decision], *args: Any) -> Admitted:
        try:
            decision = await self.decisions.decide(fn, *args)
        except Exception:  # a bug must not answer with a traceback, nor admit unchecked
            log.exception("the admission decision failed unexpectedly")
            self.metrics.refused.labels(reason=INTERNAL_ERROR).inc()
            raise kopf.AdmissionError(
                f"{INTERNAL_ERROR}: the webhook could not decide on this pod; it is refused "
                "rather than admitted unchecked (the operator's log says why)",
                code=500,
            ) from None
        if decision is None:
            self.metrics.refused.labels(reason=TIMED_OUT).inc()
            raise kopf.AdmissionError(
                f"{TIMED_OUT}: the decision on this pod took longer than "
                f"{self.decisions.timeout:g} s; it is refused rather than admitted unchecked",
                code=503,
            )
        if not isinstance(decision, Admitted):
            self.metrics.refused.labels(reason=decision.reason).inc()
            raise kopf.AdmissionError(f"{decision.reason}: {decision.message}", code=403)
        return decision


def register(
    registry: kopf.OperatorRegistry,
    profiles: Callable[[], dict[str, WindowsRuntimeProfile]],
    metrics: AdmissionMetrics,
    synced: Callable[[], bool] = lambda: True,
    decider: Decider | None = None,
    *,
    images: ImageAdmission | None = None,
) -> None:
    """The mutating (pod CREATE) and validating (pod CREATE and UPDATE) handlers; each
    decision runs in ``decider``'s threads with a deadline.

    Before the operator has listed the profiles once it cannot tell a wcow pod from another,
    so it refuses (the pod's controller or the user tries again; the API server does not)
    rather than admit unchecked. With ``images`` (--resolve-images) the mutating webhook
    also reads the images (and pins a Hyper-V pod's), the validating one judges images an
    UPDATE changes; at CREATE it checks the sizing of the pod as pinned without reading again.
    Lookups can block up to their deadline, so the decisions then get more threads."""
    decider = decider or Decider(workers=IMAGE_WORKERS if images else 2)
    judge = _Judge(profiles, metrics, synced, decider, images)

    @kopf.on.mutate("", "v1", "pods", id=MUTATE_ID, operations=["CREATE"], registry=registry)
    async def mutate(
        body: kopf.Body,
        patch: kopf.Patch,
        warnings: list[str] | None = None,
        dryrun: bool = False,
        **_: Any,
    ) -> None:
        await judge.mutate(body, patch, warnings if warnings is not None else [], dryrun)

    # subresource "*": the pod itself and pods/ephemeralcontainers (the only subresource the
    # webhook's rules send), whose object is the whole pod with its new ephemeral containers.
    @kopf.on.validate(
        "", "v1", "pods", id=VALIDATE_ID, operations=["CREATE", "UPDATE"], subresource="*",
        registry=registry,
    )  # fmt: skip
    async def validate(
        body: kopf.Body,
        old: kopf.Body | None = None,
        operation: str | None = None,
        warnings: list[str] | None = None,
        dryrun: bool = False,
        **_: Any,
    ) -> None:
        previous = old if operation == "UPDATE" else None
        await judge.validate(body, previous, warnings if warnings is not None else [], dryrun)
