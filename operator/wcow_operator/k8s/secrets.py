"""The registry credentials Secret of the image checks: read by name, in the operator's
namespace only (RBAC: ``rbac.registry_secret_rules``, ``get`` on that one resourceName)."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from wcow_operator.k8s.transport import JsonTransport, TransportError

log = logging.getLogger(__name__)
DOCKER_CONFIG_KEY: Final = ".dockerconfigjson"
SCOPES_KEY: Final = "scopes.json"  # wcow_operator.registry.credentials
MAX_SECRET_BYTES: Final = 1 << 20  # the API server's own bound on a Secret


class RegistrySecret:
    def __init__(self, api_client: client.ApiClient, namespace: str, name: str) -> None:
        self._transport = JsonTransport(api_client, timeout_seconds=10)
        self.namespace, self.name = namespace, name

    def read(self) -> tuple[dict[str, Any] | None, Any]:
        """The Secret's ``.dockerconfigjson`` document and its ``scopes.json`` (None when
        absent); (None, None) with a log line saying why when the Secret is missing,
        unreadable or of another shape: lookups are then anonymous."""
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}"
        where = f"registry Secret {self.namespace}/{self.name}"
        try:
            secret = self._transport.json("GET", path) or {}
        except (ApiException, *TransportError) as error:
            status = getattr(error, "status", 0)
            log.warning("%s cannot be read (HTTP %s): image lookups are anonymous", where, status)
            return None, None
        data = secret.get("data") or {}
        document = _decoded(data, DOCKER_CONFIG_KEY, where)
        if not isinstance(document, dict):
            log.warning(
                "%s has no %s document: image lookups are anonymous", where, DOCKER_CONFIG_KEY
            )
            return None, None
        return document, _decoded(data, SCOPES_KEY, where)


def _decoded(data: dict[str, Any], key: str, where: str) -> Any:
    """A key of the Secret as JSON; None when absent, or (and a log line) not base64 JSON."""
    encoded = data.get(key)
    if encoded is None:
        return None
    if not isinstance(encoded, str) or len(encoded) > MAX_SECRET_BYTES:
        log.warning(
            "%s: %s is not a Secret value of at most %d bytes", where, key, MAX_SECRET_BYTES
        )
        return None
    try:
        return json.loads(base64.b64decode(encoded))
    except (ValueError, RecursionError):
        log.warning("%s: %s is not base64 JSON", where, key)
        return None
