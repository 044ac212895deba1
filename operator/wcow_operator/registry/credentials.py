"""Registry credentials, and who may use them.

The operator's registry Secret (``--registry-secret``, a ``kubernetes.io/dockerconfigjson``
Secret in its namespace) holds ``.dockerconfigjson`` and, beside it, ``scopes.json``: for
each registry host of the Secret, the namespaces whose pods' images may be read with its
credentials, and (optionally) the repositories on that host they may be used for::

    {"registry.corp:5000": {"namespaces": ["team-a", "team-b-*"],
                            "repositories": ["team-a/*", "common/*"]}}

Patterns are globs (``*`` and ``?``). A host of ``.dockerconfigjson`` that ``scopes.json``
does not name is used for no pod: credentials reach only the tenants an administrator gave
them to, and a tenant without them cannot learn through the operator what only they could
read. (The image checks' cache is kept per credential for the same reason: see
``resolver``.)
"""

from __future__ import annotations

import base64
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

DOCKER_HUB: Final = "registry-1.docker.io"
SCOPES_KEY: Final = "scopes.json"
MAX_PATTERNS: Final = 256


@dataclass(frozen=True)
class Credential:
    user: str
    password: str
    namespaces: tuple[str, ...] = ()
    repositories: tuple[str, ...] = ("*",)

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"Credential(user={self.user!r}, namespaces={self.namespaces!r})"

    def allows(self, namespace: str | None, repository: str) -> bool:
        if namespace is None:
            return False
        return any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces) and any(
            fnmatch.fnmatchcase(repository, p) for p in self.repositories
        )


def _host(key: str) -> str:
    host = re.sub(r"^https?://", "", key).split("/", 1)[0].lower()
    return DOCKER_HUB if host in ("docker.io", "index.docker.io") else host


def credentials_from_dockerconfig(document: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """(user, password) by registry host from a ``.dockerconfigjson`` document; entries of
    other shapes are skipped."""
    found: dict[str, tuple[str, str]] = {}
    auths = document.get("auths")
    for key, entry in (auths if isinstance(auths, dict) else {}).items():
        if not isinstance(key, str) or not isinstance(entry, dict):
            continue
        user, password = entry.get("username"), entry.get("password")
        if isinstance(entry.get("auth"), str):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
        if isinstance(user, str) and isinstance(password, str):
            found[_host(key)] = (user, password)
    return found


def _patterns(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        return None
    if not all(isinstance(v, str) and 0 < len(v) <= 253 for v in value):
        return None
    return tuple(value)


def scoped_credentials(
    document: Mapping[str, Any], scopes: Any
) -> tuple[dict[str, Credential], list[str]]:
    """The Secret's credentials with their scopes, and what was left out and why (for the
    operator's log: hosts, never secrets)."""
    found: dict[str, Credential] = {}
    problems: list[str] = []
    table = scopes if isinstance(scopes, dict) else {}
    if scopes is not None and not isinstance(scopes, dict):
        problems.append(f"{SCOPES_KEY} is not a JSON object: no credentials are used")
    for host, (user, password) in credentials_from_dockerconfig(document).items():
        scope = table.get(host)
        if not isinstance(scope, dict):
            problems.append(f"credentials for {host} have no scope in {SCOPES_KEY}: not used")
            continue
        namespaces = _patterns(scope.get("namespaces"))
        repositories = _patterns(scope.get("repositories", ["*"]))
        if not namespaces or repositories is None:
            problems.append(
                f"{SCOPES_KEY}: {host}: namespaces (and repositories, if given) must be lists "
                "of patterns: its credentials are not used"
            )
            continue
        found[host] = Credential(user, password, namespaces, repositories)
    return found, problems
