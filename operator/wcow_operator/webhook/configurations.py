"""The webhook configurations, kept by ``WebhookKeeper`` rather than kopf's
``settings.admission.managed``: kopf's managed configurations cannot carry the
namespaceSelector and matchConditions that keep every pod outside the wcow classes away from
the webhook (see ``render.webhooks``), and they always set failurePolicy Fail with a 30 s
timeout for whatever the rules match.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.render.webhooks import (
    KINDS,
    OwnerReference,
    bundle_trusts,
    ca_bundle_of,
    merged_ca_bundle,
    webhook_configuration,
)
from wcow_operator.webhook.certificates import ServingCertificate
from wcow_operator.webhook.serving import WebhookSettings
from wcow_support.retry import NO_DELAY, retry

log = logging.getLogger(__name__)


class ConfigurationsApi(Protocol):
    """What the keeper needs of the API (``k8s.webhook_configurations.WebhookConfigurations``)."""

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
