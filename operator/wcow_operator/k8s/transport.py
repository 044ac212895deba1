"""The operator's one HTTP client stack: JSON over the kubernetes client's connection pool.

Every call of ours goes through ``JsonTransport.request`` (the adapter in ``api``, the
webhook configurations in ``webhooks``); only the Lease election uses the client's typed
``CoordinationV1Api``, because ``kubernetes.leaderelection`` is built on it. The typed API
classes cost memory (CoreV1Api alone holds about 85 MiB of validators in client 37), and the
controller keeps plain JSON dicts anyway.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from wcow_operator.controller.cluster_api import ApiError

FIELD_MANAGER = "wcow-operator"
# Nobody answered at all (refused, reset, timed out): worth retrying, like a 5xx.
TransportError = (urllib3.exceptions.HTTPError, OSError)


class JsonTransport:
    def __init__(self, api_client: client.ApiClient, timeout_seconds: float) -> None:
        self._client = api_client
        self.timeout = timeout_seconds

    def request(
        self,
        path: str,
        query: list[tuple[str, str]],
        accept: str,
        timeout: float | None = None,
        *,
        method: str = "GET",
        body: dict[str, Any] | None = None,
        content_type: str | None = None,
    ) -> Any:
        """The urllib3 response of a 2xx answer (stream it or ``read()`` it); any other
        status raises ``ApiException`` as the typed client would."""
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        # The body goes around param_serialize: it is plain JSON already (dicts, lists, str,
        # numbers), and the client's walk converting typed models visits every value of it
        # (about a sixth of a write's Python time, by yappi); the client's json.dumps sends it.
        method, url, headers, _, _ = self._client.param_serialize(
            method,
            path,
            query_params=query,
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(
            method,
            url,
            header_params=headers,
            body=body,
            _request_timeout=timeout or self.timeout,
        )
        if not 200 <= response.status < 300:
            response.read()  # type: ignore[no-untyped-call]
            raise ApiException(http_resp=response, body=response.data, data=None)
        return response

    def json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON request: writes carry the field manager, patches are merge patches.
        The decoded answer (None when empty)."""
        query = [("fieldManager", FIELD_MANAGER)] if method in ("POST", "PUT", "PATCH") else []
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        response = self.request(
            path, query, "application/json", method=method, body=body, content_type=content
        )
        data = response.read()
        return json.loads(data) if data else None


def api_error(error: ApiException | urllib3.exceptions.HTTPError | OSError) -> ApiError:
    """What the controller sees of a failed request: the status (0: no answer), the reason
    and the server's message."""
    if isinstance(error, ApiException):
        return ApiError(error.status or 0, error.reason or "", _message(error))
    return ApiError(0, type(error).__name__, str(error))


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "").get("message", error.body))
    except (TypeError, ValueError, AttributeError):
        return str(error.body or error.reason)
