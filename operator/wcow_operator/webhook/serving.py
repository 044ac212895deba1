"""How this replica serves the admission webhook: its port and address, the endpoint the
configurations name, and its serving certificate (cert-manager's, or one of its own CA's:
``webhook.certificates``)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from wcow_operator.render.webhooks import Endpoint
from wcow_operator.webhook.certificates import Authority, ServingCertificate


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
