"""``kubectl wcow diagnose``'s bundle: redaction and the tar.gz (no API calls).

A bundle is attached to tickets and chat threads, so nothing in it may let its reader into
the cluster. The viewer roles never read a Secret, but logs and objects can still carry a
token, a password or a key (a kubeconfig pasted into a log line, an annotation, a URL with
credentials). Everything written passes ``redact_object`` (objects) and then ``redact_text``
(every byte of every file), which replace what looks like a credential by ``REDACTED``.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

REDACTED: Final = "REDACTED"
# Object keys whose values are credentials wherever they appear (case-insensitive, after an
# optional prefix such as "client-" or "tls."). Not "key": tolerations and selectors use it.
_SECRET_WORDS: Final = (  # the names of credentials, not one
    r"password|passwd|pwd|passphrase|token|secret|apikey|api[-_]key|auth|authorization|"  # noqa: S105
    r"credentials?|private[-_]?key|client[-_]key(?:[-_]data)?|token[-_]data|access[-_]key|"
    r"connection[-_]?string|conn[-_]?str|dsn|cookie|session"
)
SECRET_KEY: Final = re.compile(rf"(?i)^(?:.*[-_.])?(?:{_SECRET_WORDS})$")
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
    # Authorization headers and tokens of any scheme (Bearer, Basic, Token, ...).
    (
        re.compile(r"(?i)\b(bearer|basic|token|digest|negotiate)(\s+)[A-Za-z0-9._~+/=-]{6,}"),
        rf"\1\2{REDACTED}",
    ),
    # Well-known token shapes: GitHub, GitLab, Slack, AWS access keys, Azure SAS signatures.
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"(?i)([?&]sig=)[A-Za-z0-9%/+=]{10,}"), rf"\1{REDACTED}"),
    # user:password@ in URLs.
    (re.compile(r"(://)[^/\s:@]+:[^/\s@]+@"), rf"\1{REDACTED}@"),
    # key=value, key: value and "key": "value" for credential-named keys, the key with any
    # prefix or suffix (DB_PASSWORD=, client_secret=, "apiToken": ...); quoted values whole.
    (
        re.compile(
            rf"""(?i)(["']?[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*["']?\s*[:=]\s*)"""
            # (a scheme word is left for the pattern above: "Authorization: Bearer ...")
            r"""(?!(?:bearer|basic|token|digest|negotiate|REDACTED)\b)"""
            r"""("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^"'\s,;}&]+)"""
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
    written to a temporary file this call creates (a fresh random name, opened with O_EXCL
    and mode 0600: a name planted in the folder, a symbolic link say, is never written
    through), then renamed over ``path``, so a failure leaves no half bundle."""
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".partial", dir=path.parent
    )
    partial = Path(temporary)
    try:
        with os.fdopen(descriptor, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as archive:
            for name in sorted(files):
                data = redact_text(files[name]).encode("utf-8")
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size = len(data)
                info.mtime = int(mtime)
                info.mode = 0o600
                archive.addfile(info, io.BytesIO(data))
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path
