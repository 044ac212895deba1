"""A serving certificate for the admission webhook when cert-manager does not provide one.

Each replica makes its own CA and serving certificate at start and keeps the keys in memory
and in a private temporary directory only; its CA joins the webhook configurations' CA
bundle (``render.webhooks.merged_ca_bundle``). No Secret is written or read, so the operator
needs no access to Secrets.

The CA lives ten years, the serving certificate one; ``keep_renewed`` issues a new serving
certificate from the same CA two thirds into its life, into the same files, and kopf's server
rereads them (every minute), so a replica that runs for years never serves an expired
certificate and the CA bundle never has to change for it.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

CA_VALIDITY = datetime.timedelta(days=3650)
VALIDITY = datetime.timedelta(days=365)
BACKDATE = datetime.timedelta(minutes=5)  # clocks of the API server and the operator differ


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: str
    certfile: Path
    keyfile: Path
    not_before: datetime.datetime | None = None  # None: not ours to renew (cert-manager)
    not_after: datetime.datetime | None = None

    def renewal_due(self, now: datetime.datetime) -> bool:
        if self.not_before is None or self.not_after is None:
            return False
        return now >= self.not_before + (self.not_after - self.not_before) * 2 / 3


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` at once (owner-only), so the server never reads half a file."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)
    with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)
    os.replace(temporary, path)


class Authority:
    """This replica's own CA: its key never leaves memory."""

    def __init__(self, owner: str = "", validity: datetime.timedelta = CA_VALIDITY) -> None:
        """``owner``: the pod's name, so the CA of this pod before a restart is recognised
        (and dropped from the CA bundle) rather than kept beside the new one."""
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"wcow-operator webhook CA {owner}".strip()[:64])
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_pem = self.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")

    def issue(
        self,
        hosts: Iterable[str],
        folder: Path,
        validity: datetime.timedelta = VALIDITY,
        backdate: datetime.timedelta = BACKDATE,
    ) -> ServingCertificate:
        """A serving certificate for ``hosts`` (DNS names or IP addresses), written with its
        key to ``folder``/tls.pem."""
        now = datetime.datetime.now(datetime.UTC)
        hosts = list(hosts)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - backdate)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        # Key and certificate in one file, replaced at once: the server can never load the
        # new certificate with the old key (kopf's TLS takes both from the same path).
        pem = folder / "tls.pem"
        _write(
            pem,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + cert.public_bytes(serialization.Encoding.PEM),
        )
        return ServingCertificate(
            ca_pem=self.ca_pem,
            certfile=pem,
            keyfile=pem,
            not_before=cert.not_valid_before_utc,
            not_after=cert.not_valid_after_utc,
        )


def self_signed(hosts: Iterable[str], directory: Path | None = None) -> ServingCertificate:
    """A fresh CA and a serving certificate for ``hosts`` (DNS names or IP addresses)."""
    folder = directory or Path(tempfile.mkdtemp(prefix="wcow-webhook-"))
    return Authority().issue(hosts, folder)


def keep_renewed(
    authority: Authority,
    hosts: Iterable[str],
    first: ServingCertificate,
    stop: threading.Event,
    *,
    validity: datetime.timedelta = VALIDITY,
    check_every: float = 3600.0,
) -> None:
    """Issue a new serving certificate into the same files whenever the current one is two
    thirds through its life (until ``stop``)."""
    hosts = list(hosts)
    current = first
    while not stop.wait(check_every):
        if current.renewal_due(datetime.datetime.now(datetime.UTC)):
            current = authority.issue(hosts, current.certfile.parent, validity)
            log.info("renewed the webhook's serving certificate (valid to %s)", current.not_after)
