"""The pod admission webhook, served by kopf: a thin adapter over
``wcow_operator.reconcile.admission.admit``.

kopf serves the endpoints (``kopf.WebhookServer``, one path per handler id) from its own
thread (``handlers.webhook_server``); each decision runs in the ``Decider``'s threads. The webhook
configurations are kept by ``WebhookKeeper`` rather than kopf's ``settings.admission.managed``:
kopf's managed configurations cannot carry the namespaceSelector and matchConditions that keep
every pod outside the wcow classes away from the webhook (see ``render.webhooks``), and they
always set failurePolicy Fail with a 30 s timeout for whatever the rules match.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import kopf
from prometheus_client import CollectorRegistry, Counter

from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.text import shown
from wcow_contract.v1alpha1 import WindowsRuntimeProfile
from wcow_operator.controller.api import ApiError
from wcow_operator.handlers.certificates import Authority, ServingCertificate
from wcow_operator.reconcile.admission import (
    REASONS,
    VM_TOO_SMALL,
    AdmissionWarning,
    Admitted,
    Decision,
    admit,
    admit_update,
)
from wcow_operator.reconcile.images import IMAGE_UNCHECKED
from wcow_operator.reconcile.images import REASONS as IMAGE_REASONS
from wcow_operator.registry.resolver import ImageAdmission
from wcow_operator.render.webhooks import (
    KINDS,
    MUTATE_ID,
    VALIDATE_ID,
    Endpoint,
    OwnerReference,
    bundle_trusts,
    ca_bundle_of,
    merged_ca_bundle,
    webhook_configuration,
)
from wcow_support.retry import NO_DELAY, retry

log = logging.getLogger(__name__)


NOT_READY = "OperatorNotReady"  # refusal reasons of the webhook, not of the decision
TIMED_OUT = "DecisionTimeout"
# A decision takes well under 50 ms for any pod the API server can send (the pure decision
# walks bounded input); this deadline only guards against the unforeseen, and stays well
# inside the API server's timeoutSeconds (render.webhooks.TIMEOUT_SECONDS) so the pod gets
# a refusal that says why rather than a "context deadline exceeded".
DECISION_TIMEOUT_SECONDS = 2.0
IMAGE_WORKERS = 8  # with image checks: a decision may wait up to a second on a registry


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.admitted = Counter(
            "wcow_admission_admitted_total",
            "Pods of wcow RuntimeClasses admitted (changed or not), dry runs included",
            registry=registry,
        )
        self.mutated = Counter(
            "wcow_admission_mutated_total",
            "Pods admitted with changes (VM sizing annotations, memory requests)",
            registry=registry,
        )
        self.refused = Counter(
            "wcow_admission_refused_total",
            "Pods refused, by reason",
            ["reason"],
            registry=registry,
        )
        for reason in (*REASONS, *IMAGE_REASONS, NOT_READY, TIMED_OUT):
            self.refused.labels(reason=reason)
        self.images_unchecked = Counter(
            "wcow_admission_images_unchecked_total",
            "Images admitted without their build checked (--resolve-images), by cause: "
            "Unreachable, Timeout, Unauthorized, NotFound, ServerError, TooLarge, Malformed",
            ["cause"],
            registry=registry,
        )
        self.warned = Counter(
            "wcow_admission_warned_total",
            "Pods admitted with an admission warning, by reason (VMTooSmall under "
            "spec.vm.oversizedPods: Warn; ImageUnchecked: an image not read, --resolve-images)",
            ["reason"],
            registry=registry,
        )
        self.warned.labels(reason=VM_TOO_SMALL)


class Decider:
    """Runs each decision in a small pool of threads, off kopf's event loop, with a deadline.

    The event loop keeps accepting and answering other admission requests while one is
    decided, and a decision past its deadline is answered with a refusal (DecisionTimeout)
    at once. A thread cannot be stopped, so a runaway decision would keep its worker: the
    pool is small, and the decision's own bounds (api.quantity, the caps in
    reconcile.admission) keep every decision in milliseconds; no single step holds the
    interpreter lock for long, so the reconciler, Lease renewal and probes keep running.
    Threads rather than processes: the profiles need no pickling per request and nothing
    else is shared; a process pool would buy only killability, which the bounds make moot."""

    def __init__(self, workers: int = 2, timeout: float = DECISION_TIMEOUT_SECONDS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="admission")
        self.timeout = timeout

    async def decide(self, fn: Callable[..., Decision], *args: Any) -> Decision | None:
        """The decision, or None when it missed its deadline."""
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            return await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            return None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class ProfileIndex:
    """Valid profiles by RuntimeClass name, parsed once per resourceVersion. A profile whose
    spec turned invalid keeps being judged by its last valid spec, as its RuntimeClass and plan
    entry keep their last good state (the operator reports it Valid=False); one that was never
    valid while this replica ran (it restarted since) cannot be judged: its pods pass unchanged,
    with a warning. ``classes`` names every profile, valid or not, so the webhook
    configurations do not depend on what a replica happens to remember."""

    def __init__(self, source: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, str], ...] = ()
        self._profiles: dict[str, WindowsRuntimeProfile] = {}
        self._last_valid: dict[str, WindowsRuntimeProfile] = {}  # by uid
        self._names: tuple[str, ...] = ()

    def current(self) -> dict[str, WindowsRuntimeProfile]:
        bodies = list(self._source())
        key = tuple(
            sorted(
                (str(b["metadata"]["name"]), str(b["metadata"].get("resourceVersion", "")))
                for b in bodies
            )
        )
        with self._lock:
            if key == self._key:
                return self._profiles
        parsed: dict[str, WindowsRuntimeProfile] = {}
        valid: dict[str, WindowsRuntimeProfile] = {}
        names: list[str] = []
        for body in bodies:
            metadata = body.get("metadata") or {}
            if metadata.get("deletionTimestamp"):
                continue
            names.append(str(metadata.get("name", "")))
            uid = str(metadata.get("uid", ""))
            try:
                profile = parse_profile(body)
            except ProfileInvalidError:
                last_good = self._last_valid.get(uid)
                if last_good is None:
                    continue
                profile = last_good
            valid[uid] = profile
            parsed[profile.name] = profile
        with self._lock:
            self._key, self._profiles, self._last_valid = key, parsed, valid
            self._names = tuple(sorted(names))
        return parsed

    def classes(self) -> tuple[str, ...]:
        """Every profile's RuntimeClass (a profile's class has its name), valid or not."""
        self.current()
        with self._lock:
            return self._names


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

    async def mutate(self, body: kopf.Body, patch: kopf.Patch, warnings: list[str]) -> None:
        known = self.known_profiles()
        class_name = (body.get("spec") or {}).get("runtimeClassName")
        if isinstance(class_name, str) and class_name not in known:
            warnings.append(
                f"WindowsRuntimeProfile {shown(class_name)} is not valid and this operator "
                "replica has no earlier valid spec of it: the pod is admitted unchecked "
                "(kubectl describe wrp shows why the profile is invalid)"
            )
        decide = self.images.admit if self.images else admit
        decision = await self.decided(decide, dict(body), known)
        # Only the images' warnings here: the validating webhook does not read images at
        # CREATE, and returns the sizing warnings itself (where the pod is final), so the
        # client sees each warning once.
        self._tell(warnings, [w for w in decision.warnings if w.reason == IMAGE_UNCHECKED])
        if decision.profile is not None:
            self.metrics.admitted.inc()
        if decision.mutated:
            self.metrics.mutated.inc()
            patch.fns.append(_replace_with(decision.pod))

    async def validate(self, body: kopf.Body, old: kopf.Body | None, warnings: list[str]) -> None:
        """CREATE (``old`` None): the final pod, after every mutating webhook: refused if it
        would be refused now (e.g. another webhook raised its limits past the bounds after
        ours sized it). UPDATE: what hcsshim reads is fixed at creation
        (reconcile.admission.admit_update). The decision's warnings are returned here, where
        the pod is final, so the client sees each once."""
        known = self.known_profiles()
        if old is not None:
            judged = self.images.admit_update if self.images else admit_update
            decision = await self.decided(judged, dict(old), dict(body), known)
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
        decision = await self.decisions.decide(fn, *args)
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
        body: kopf.Body, patch: kopf.Patch, warnings: list[str] | None = None, **_: Any
    ) -> None:
        await judge.mutate(body, patch, warnings if warnings is not None else [])

    @kopf.on.validate(
        "", "v1", "pods", id=VALIDATE_ID, operations=["CREATE", "UPDATE"], registry=registry
    )
    async def validate(
        body: kopf.Body,
        old: kopf.Body | None = None,
        operation: str | None = None,
        warnings: list[str] | None = None,
        **_: Any,
    ) -> None:
        previous = old if operation == "UPDATE" else None
        await judge.validate(body, previous, warnings if warnings is not None else [])


@dataclass(frozen=True)
class WebhookSettings:
    port: int
    endpoint: Endpoint
    excluded_namespaces: tuple[str, ...]
    cert_dir: Path | None = None  # cert-manager's Secret, mounted (tls.crt, tls.key, ca.crt)
    ca_injection_from: str | None = None  # "<namespace>/<Certificate>" for cert-manager
    owner_clusterrole: str | None = None  # the ClusterRole whose deletion removes them
    hosts: tuple[str, ...] = ("localhost",)
    identity: str = ""  # the pod's name: names this replica's own CA
    listen: str = "0.0.0.0"  # noqa: S104 - the API server reaches it through the Service


def serving_certificate(settings: WebhookSettings) -> tuple[ServingCertificate, Authority | None]:
    """cert-manager's files when mounted (renewed by cert-manager); else a certificate from
    a CA of this replica's own, and that CA to renew it with."""
    if settings.cert_dir is not None:
        missing = [n for n in ("tls.crt", "tls.key") if not (settings.cert_dir / n).is_file()]
        if missing:
            raise CertificateMissingError(
                f"--webhook-cert-dir {settings.cert_dir} has no {' or '.join(missing)}: mount the "
                "Secret of the webhook's cert-manager Certificate there"
            )
        ca = settings.cert_dir / "ca.crt"
        mounted = ServingCertificate(
            ca_pem=ca.read_text(encoding="ascii") if ca.exists() else "",
            certfile=settings.cert_dir / "tls.crt",
            keyfile=settings.cert_dir / "tls.key",
        )
        return mounted, None
    authority = Authority(settings.identity)
    folder = Path(tempfile.mkdtemp(prefix="wcow-webhook-"))
    return authority.issue(settings.hosts, folder), authority


class CertificateMissingError(Exception):
    pass


class ConfigurationsApi(Protocol):
    """What the keeper needs of the API (``k8s.webhooks.WebhookConfigurations``)."""

    def read(self, kind: str) -> dict[str, Any] | None: ...
    def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace(self, kind: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def owner(self, cluster_role: str) -> OwnerReference | None: ...


class OwnerMissingError(Exception):
    """The owning ClusterRole is gone (an uninstall under way): write nothing, or the
    configurations would outlive the operator and block the wcow classes' pods."""


class WebhookKeeper:
    """Keeps both webhook configurations as ``render.webhooks`` describes them: created
    when absent, rewritten when the profiles' classes or this replica's CA are missing from
    them, untouched otherwise (no writes at rest; two reads a minute to notice a deleted or
    edited configuration)."""

    def __init__(
        self,
        api: ConfigurationsApi,
        settings: WebhookSettings,
        certificate: ServingCertificate,
        runtime_classes: Callable[[], Iterable[str]],
    ) -> None:
        self._api = api
        self._settings = settings
        self._certificate = certificate
        self._classes = runtime_classes
        self._owner: OwnerReference | None = None
        self.published = threading.Event()  # both configurations current, with our CA

    def desired(self, kind: str, current: dict[str, Any] | None) -> dict[str, Any]:
        settings = self._settings
        existing = ca_bundle_of(current)
        if settings.ca_injection_from is not None:
            bundle = existing  # cert-manager's cainjector writes it
            annotations = {"cert-manager.io/inject-ca-from": settings.ca_injection_from}
        else:
            bundle = merged_ca_bundle(existing, self._certificate.ca_pem)
            annotations = None
        return webhook_configuration(
            kind,
            settings.endpoint,
            self._classes(),
            settings.excluded_namespaces,
            ca_bundle=bundle,
            annotations=annotations,
            owner=self._owner,
        )

    def sync(self) -> int:
        """Make both configurations current; the number of writes made."""
        if self._settings.owner_clusterrole:
            self._owner = self._api.owner(self._settings.owner_clusterrole)
            if self._owner is None:
                self.published.clear()
                raise OwnerMissingError(
                    f"ClusterRole {self._settings.owner_clusterrole} (--webhook-owner-clusterrole) "
                    "does not exist: not writing the webhook configurations it would own"
                )
        writes = 0
        stored: dict[str, dict[str, Any]] = {}
        for kind in KINDS:
            stored[kind], wrote = self._sync_one(kind)
            writes += wrote
            if not all(hook.get("matchConditions") for hook in stored[kind].get("webhooks") or []):
                log.error(
                    "the API server dropped the %s webhook's matchConditions (Kubernetes before "
                    "1.28, or the AdmissionWebhookMatchConditions feature gate off): every pod "
                    "outside the excluded namespaces now reaches this webhook, and while it is "
                    "down none can be created; upgrade, enable the gate or disable the webhook",
                    kind,
                )
        if self._trusted(stored.values()):
            self.published.set()
        else:
            self.published.clear()
        return writes

    def _sync_one(self, kind: str) -> tuple[dict[str, Any], bool]:
        """The configuration as stored after making it current, and whether it was written.
        A conflict (another replica wrote first) reads again, at once, up to five times."""
        try:
            return retry(
                lambda: self._write_one(kind),
                attempts=5,
                backoff=NO_DELAY,
                retryable=lambda error: isinstance(error, ApiError) and error.status == 409,
            )
        except ApiError as error:
            if error.status == 409:
                raise ApiError(
                    409, "Conflict", f"{kind} configuration: 5 conflicts in a row"
                ) from None
            raise

    def _write_one(self, kind: str) -> tuple[dict[str, Any], bool]:
        current = self._api.read(kind)
        body = self.desired(kind, current)
        if current is None:
            return self._api.create(kind, body), True
        if _same(current, body):
            return current, False
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._api.replace(kind, body), True

    def _trusted(self, configurations: Iterable[dict[str, Any]]) -> bool:
        """Whether the API server trusts the certificate this replica serves: its own CA is in
        the bundle (it was merged in), or cert-manager's cainjector has written the mounted
        Secret's ca.crt there."""
        if self._settings.ca_injection_from is None or self._settings.cert_dir is None:
            return True
        try:
            ca = (self._settings.cert_dir / "ca.crt").read_text(encoding="ascii")
        except (OSError, ValueError):
            ca = ""
        if not ca.strip():
            return True  # an issuer that gives no CA: nothing to check against
        return all(bundle_trusts(ca_bundle_of(c), ca) for c in configurations)

    def run(self, stop: threading.Event, interval: float = 2.0, recheck: float = 60.0) -> None:
        """Sync when the classes change, and every ``recheck`` seconds in case someone
        deleted or edited a configuration."""
        last: tuple[str, ...] | None = None
        checked = 0.0
        while not stop.is_set():
            classes = tuple(sorted(self._classes()))
            # Until the API server trusts this replica, look again soon (cainjector at work).
            every = recheck if self.published.is_set() else interval
            if classes != last or time.monotonic() - checked >= every:
                try:
                    self.sync()
                    last, checked = classes, time.monotonic()
                except (ApiError, OwnerMissingError) as error:
                    log.warning("could not update the admission webhook configurations: %s", error)
                except Exception:  # the thread must outlive any one failure
                    log.exception("could not update the admission webhook configurations")
            stop.wait(interval)


def _same(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether what the server holds says what we would write (the server adds defaults)."""
    want_hooks = desired["webhooks"]
    have_hooks = current.get("webhooks") or []
    if len(want_hooks) != len(have_hooks):
        return False
    for want, have in zip(want_hooks, have_hooks, strict=True):
        for key, value in want.items():
            if key == "objectSelector" and not value and not have.get(key):
                continue
            if have.get(key) != value:
                return False
    annotations = desired["metadata"].get("annotations") or {}
    have_annotations = current["metadata"].get("annotations") or {}
    owners = desired["metadata"].get("ownerReferences") or []
    if owners and (current["metadata"].get("ownerReferences") or []) != owners:
        return False
    return all(have_annotations.get(k) == v for k, v in annotations.items())
