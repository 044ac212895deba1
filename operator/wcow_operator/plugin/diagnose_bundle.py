"""``kubectl wcow diagnose``'s bundle: redaction and the tar.gz (no API calls).

A bundle is attached to tickets and chat threads, so nothing in it may let its reader into
the cluster. The viewer roles never read a Secret, but logs and objects can still carry a
token, a password or a key (a kubeconfig pasted into a log line, an annotation, a URL with
credentials). Everything written passes ``redact_object`` (objects) and then ``redact_text``
(every byte of every file), which replace what looks like a credential by ``REDACTED``.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

REDACTED: Final = "REDACTED"
# Object keys whose values are credentials wherever they appear (case-insensitive, after an
# optional prefix such as "client-" or "tls."). Not "key": tolerations and selectors use it.
SECRET_KEY: Final = re.compile(
    r"(?i)^(?:.*[-_.])?(?:password|passwd|token|secret|apikey|api[-_]key|auth|"
    r"credentials?|private[-_]?key|client[-_]key(?:[-_]data)?|token[-_]data)$"
)
DROPPED_ANNOTATIONS: Final = ("kubectl.kubernetes.io/last-applied-configuration",)
_PATTERNS: Final = [
    # PEM private keys, whole blocks.
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.DOTALL
        ),
        f"-----{REDACTED} PRIVATE KEY-----",
    ),
    # JSON Web Tokens (ServiceAccount tokens are JWTs): header.payload.signature.
    (re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    # Authorization headers and bearer tokens.
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{6,}"), rf"\1\2{REDACTED}"),
    # user:password@ in URLs.
    (re.compile(r"(://)[^/\s:@]+:[^/\s@]+@"), rf"\1{REDACTED}@"),
    # key=value and "key": "value" for credential-named keys (logs, JSON in annotations).
    (
        re.compile(
            r"""(?i)(["']?\b(?:password|passwd|token|secret|api[-_]?key|auth|"""
            r"""client[-_]key[-_]data|token[-_]data)["']?\s*[:=]\s*["']?)([^"'\s,;}&]+)"""
        ),
        rf"\1{REDACTED}",
    ),
]


def redact_text(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_object(value: Any) -> Any:
    """A copy of ``value`` without managedFields, last-applied configurations, or the values
    of credential-named keys."""
    if isinstance(value, Mapping):
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if key == "managedFields" or key in DROPPED_ANNOTATIONS:
                continue
            secret = SECRET_KEY.match(str(key)) and isinstance(item, str | bytes) and item
            kept[str(key)] = REDACTED if secret else redact_object(item)
        return kept
    if isinstance(value, list):
        return [redact_object(item) for item in value]
    return value


def dump(value: Any) -> str:
    """An object or a list of them as YAML, redacted."""
    return yaml.safe_dump(redact_object(value), sort_keys=True, allow_unicode=True, width=100)


def write_bundle(files: Mapping[str, str], path: Path, top: str, mtime: float) -> Path:
    """The files (relative names) under ``top/`` in a tar.gz at ``path``, each redacted;
    written to a temporary name first, so a failure leaves no half bundle."""
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        for name in sorted(files):
            data = redact_text(files[name]).encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = int(mtime)
            info.mode = 0o600
            archive.addfile(info, io.BytesIO(data))
    partial.chmod(0o600)
    partial.replace(path)
    return path
