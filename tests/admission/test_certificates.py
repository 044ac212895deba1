"""The webhook's own CA and serving certificate (no cert-manager): what the API server checks
(names, chain), and renewal before expiry into the files kopf's server rereads."""

from __future__ import annotations

import contextlib
import datetime
import ssl
import stat
import threading
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from wcow_operator.webhook.certificates import Authority, keep_renewed

SERVICE = "wcow-runtime-operator-webhook.wcow-system.svc"


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _server_accepts_a_client_trusting(ca_pem: str, certfile: Path, keyfile: Path) -> None:
    """What the API server does: TLS to the service's name, trusting only the CA bundle."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(certfile, keyfile)
    client = ssl.create_default_context(cadata=ca_pem)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    back_in, back_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_client = client.wrap_bio(back_in, outgoing, server_hostname=SERVICE)
    tls_server = server.wrap_bio(incoming, back_out, server_side=True)
    for _ in range(10):
        for side in (tls_client, tls_server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        incoming.write(outgoing.read())
        back_in.write(back_out.read())
    tls_client.do_handshake()  # raises SSLCertVerificationError on a wrong name or chain


def test_the_serving_certificate_is_for_the_service_and_chains_to_the_replicas_ca(
    tmp_path: Path,
) -> None:
    authority = Authority()
    served = authority.issue([SERVICE, "wcow-runtime-operator-webhook"], tmp_path)
    certificate = _load(served.certfile)
    certificate.verify_directly_issued_by(authority.certificate)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert SERVICE in names.value.get_values_for_type(x509.DNSName)
    assert stat.S_IMODE(served.keyfile.stat().st_mode) == 0o600
    _server_accepts_a_client_trusting(served.ca_pem, served.certfile, served.keyfile)
    assert served.not_after is not None
    assert served.not_after - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=300)


def test_the_certificate_is_renewed_from_the_same_ca_before_it_expires(tmp_path: Path) -> None:
    authority = Authority()
    validity = datetime.timedelta(seconds=3)
    first = authority.issue([SERVICE], tmp_path, validity, backdate=datetime.timedelta(0))
    assert first.not_before is not None
    assert not first.renewal_due(first.not_before + validity / 2)
    assert first.renewal_due(first.not_before + validity * 2 / 3)
    old = first.certfile.read_bytes()
    stop = threading.Event()
    thread = threading.Thread(
        target=keep_renewed,
        args=(authority, [SERVICE], first, stop),
        kwargs={"validity": datetime.timedelta(days=365), "check_every": 0.05},
    )
    thread.start()
    try:
        deadline = time.monotonic() + 30  # renewal falls due 2 s after the start
        while first.certfile.read_bytes() == old and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    renewed = _load(first.certfile)
    assert renewed.serial_number != x509.load_pem_x509_certificate(old).serial_number
    renewed.verify_directly_issued_by(authority.certificate)  # the CA bundle stays valid
    key = serialization.load_pem_private_key(first.keyfile.read_bytes(), password=None)
    assert key.public_key() == renewed.public_key()
    _server_accepts_a_client_trusting(authority.ca_pem, first.certfile, first.keyfile)
