"""A stand-in Kubernetes API server on 127.0.0.1 for smoke tests: kmock plus a thin layer.

kmock's ``KubernetesEmulator`` (https://github.com/nolar/kmock) brings the HTTP server, the
URL grammar (core and group APIs, namespaced and cluster-scoped, subresources), discovery
(``/api``, ``/apis``, ``/apis/{group}/{version}``), an in-memory object store, LIST, GET,
WATCH streams (current objects as ADDED, then live ADDED/MODIFIED/DELETED), merge and JSON
patches, ``Status`` error bodies, and finalizers (DELETE only sets ``deletionTimestamp``
while finalizers remain; removing the last one deletes the object).

What kmock 0.8 leaves out and the operator depends on is added here, in ``_admit``, before
each write reaches kmock:

* server-set metadata: ``uid``, ``resourceVersion`` (one counter for all objects),
  ``generation`` (bumped when anything outside metadata and status changes),
  ``creationTimestamp``; ``generateName``;
* PUT (replace), which kmock 0.8 answers with 404;
* optimistic concurrency: 409 when a PUT or a merge patch names another
  ``resourceVersion`` or ``uid``, or a DELETE's preconditions do not hold;
* the ``/status`` subresource: PATCH/PUT on ``/status`` change only ``status``, writes to
  the object itself leave ``status`` alone, CREATE drops it;
* no new finalizers on an object that is being deleted (422);
* a write that changes nothing keeps the resourceVersion and sends no watch event;
* field selectors on ``metadata.name`` and ``metadata.namespace`` (``=``, ``==``, ``!=``) on
  LIST and WATCH (``_serve_list``, ``_serve_watch``): the agents select the plan and the
  rollout ConfigMaps by name, and must not take one for the other.

Still not emulated: schema validation, defaulting and CEL rules of CRDs; label selectors
and other field selectors (ignored: LIST and WATCH return everything); resourceVersion on
LIST/WATCH (every watch starts with the full state, ``timeoutSeconds`` is ignored, and an
event that happens while a watch is streaming its initial objects can be missed);
server-side apply; strategic merge patch (treated as a JSON merge patch); the garbage
collector (owner references do not cascade); quantity canonicalisation; namespaces are not
required to exist; authentication and RBAC (any token is accepted).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import secrets
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
import yaml

ANY_VERB = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"


def _conflict(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=409, reason="Conflict", message=message)


def _invalid(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=422, reason="Invalid", message=message)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _payload(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("metadata", "status")}


def _apply(
    request: kmock.Request, current: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The object as the client asks for it, and the preconditions the client states."""
    body = request.data
    if request.method == "PUT" and isinstance(body, dict):
        return body, body.get("metadata") or {}
    if request.method == "PATCH" and isinstance(body, dict):  # merge patch; strategic the same
        return _merge(current, body), body.get("metadata") or {}
    if request.method == "PATCH" and isinstance(body, list):  # JSON patch
        try:
            return jsonpatch.apply_patch(current, body, in_place=False), {}
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            raise _invalid(f"the JSON patch does not apply: {error}") from None
    raise _invalid("the body must be an object (PUT, merge patch) or a list (JSON patch)")


class ApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with the server-side rules listed in the module docstring."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self._writes = asyncio.Lock()

    # -- seeding (call before the server is shared) ----------------------------------------

    def add_crd(self, crd: dict[str, Any]) -> None:
        """Serve a CRD's resource in discovery and store the CRD object itself."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = (
                kmock.ResourceInfo(
                    kind=names["kind"],
                    singular=names.get("singular", names["kind"].lower()),
                    shortnames=set(names.get("shortNames", [])),
                    categories=set(names.get("categories", [])),
                    namespaced=spec["scope"] == "Namespaced",
                    verbs=ANY_VERB,
                    subresources=set((version.get("subresources") or {}).keys()),
                )
            )
        stored = self.stamp(copy.deepcopy(crd))
        stored["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
        self.objects[CRDS, None, crd["metadata"]["name"]] = stored

    def add_object(self, resource: str, namespace: str | None, body: dict[str, Any]) -> None:
        self.objects[resource, namespace, body["metadata"]["name"]] = self.stamp(body)

    def stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the API server sets on create."""
        metadata = body.setdefault("metadata", {})
        metadata["uid"] = str(uuid.uuid4())
        metadata["resourceVersion"] = self._next_version()
        metadata["generation"] = 1
        metadata["creationTimestamp"] = _now()
        metadata.pop("deletionTimestamp", None)
        return body

    def _next_version(self) -> str:
        return str(next(self._versions))

    # -- the layer over kmock ---------------------------------------------------------------

    async def _serve_list(self, request: kmock.Request) -> Any:
        payload = await super()._serve_list(request)
        wanted = _field_selector(request)
        return {**payload, "items": [o for o in payload["items"] if _selected(wanted, o)]}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        wanted = _field_selector(request)
        async for event in super()._serve_watch(request):
            if isinstance(event, dict) and not _selected(wanted, event.get("object") or {}):
                continue
            yield event

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.resource is None or request.method not in ("POST", "PUT", "PATCH", "DELETE"):
            return await super()._handle(request)
        # Writes one at a time: a precondition checked here still holds when kmock applies it.
        async with self._writes:
            admitted = self._admit(request)
            if isinstance(admitted, dict):  # a no-op write: no new version, no watch event
                return aiohttp.web.json_response(admitted)
            return await super()._handle(admitted)

    def _admit(self, request: kmock.Request) -> kmock.Request | dict[str, Any]:
        if request.subresource not in (None, "status"):
            raise kmock.KubernetesNotFoundError(message=f"no subresource {request.subresource}")
        if request.method == "POST":
            return self._admit_create(request)
        key = (request.resource, request.namespace, request.name)
        if request.name is None or key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        current: dict[str, Any] = copy.deepcopy(self.objects[key].raw)
        if request.method == "DELETE":
            return self._admit_delete(request, current)
        return self._admit_update(request, current)

    def _admit_create(self, request: kmock.Request) -> kmock.Request:
        body = request.data
        if not isinstance(body, dict):
            raise _invalid("the body must be an object")
        metadata = body.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + secrets.token_hex(3)
        if not metadata.get("name"):
            raise _invalid("metadata.name: Required value")
        if request.namespace is not None:
            metadata["namespace"] = request.namespace
        else:
            metadata.pop("namespace", None)
        if self._has_status(request):
            body.pop("status", None)
        self.stamp(body)  # in place: kmock stores request.data as it is
        return request

    def _admit_update(
        self, request: kmock.Request, current: dict[str, Any]
    ) -> kmock.Request | dict[str, Any]:
        wanted, preconditions = _apply(request, current)
        for field in ("resourceVersion", "uid"):
            given = preconditions.get(field)
            if given is not None and given != current["metadata"].get(field):
                raise _conflict(
                    f"Operation cannot be fulfilled on {request.resource.plural} "
                    f'"{request.name}": the object has been modified; please apply your '
                    "changes to the latest version and try again"
                )
        new = self._next_state(request, current, wanted)
        if new == current:
            return current
        new["metadata"]["resourceVersion"] = self._next_version()
        # kmock applies the change as a JSON patch from its stored state, then notifies the
        # watchers and, when deletionTimestamp is set and no finalizers are left, deletes.
        return _as_update(request, jsonpatch.make_patch(current, new).patch)

    def _next_state(
        self, request: kmock.Request, current: dict[str, Any], wanted: dict[str, Any]
    ) -> dict[str, Any]:
        """The object after a write: what the client may change, on top of what it may not."""
        cur_meta = current["metadata"]
        if request.subresource == "status":
            new = copy.deepcopy(current)
            new.pop("status", None)
            if wanted.get("status") is not None:
                new["status"] = copy.deepcopy(wanted["status"])
            return new
        new = copy.deepcopy(wanted)
        meta = new.setdefault("metadata", {})
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
            meta.pop(field, None)
            if field in cur_meta:
                meta[field] = cur_meta[field]
        meta["resourceVersion"] = cur_meta["resourceVersion"]
        meta["generation"] = cur_meta.get("generation", 1) + (_payload(new) != _payload(current))
        if self._has_status(request):
            new.pop("status", None)
            if "status" in current:
                new["status"] = current["status"]
        added = set(meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
        if cur_meta.get("deletionTimestamp") and added:
            raise _invalid(
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object "
                "is being deleted"
            )
        return new

    def _admit_delete(self, request: kmock.Request, current: dict[str, Any]) -> kmock.Request:
        options = request.data if isinstance(request.data, dict) else {}
        preconditions = options.get("preconditions") or {}
        cur_meta = current["metadata"]
        for field in ("uid", "resourceVersion"):
            given = preconditions.get(field)
            if given is not None and given != cur_meta.get(field):
                raise _conflict(
                    f"Precondition failed: {field} in precondition: {given}, "
                    f"{field} in object meta: {cur_meta.get(field)}"
                )
        if cur_meta.get("finalizers") and not cur_meta.get("deletionTimestamp"):
            ops = [
                {"op": "add", "path": "/metadata/deletionTimestamp", "value": _now()},
                {
                    "op": "replace",
                    "path": "/metadata/resourceVersion",
                    "value": self._next_version(),
                },
            ]
            return _as_update(request, ops)
        return request  # kmock deletes it (or ignores a repeated delete)

    def _has_status(self, request: kmock.Request) -> bool:
        assert request.resource is not None
        return request.resource in self.resources and "status" in (
            self.resources[request.resource].subresources
        )


def _as_update(request: kmock.Request, ops: list[dict[str, Any]]) -> kmock.Request:
    """Turn the request into the JSON-patch UPDATE that kmock stores and streams to watchers.

    In place, because kmock serves only the very request objects it has recorded (by
    identity); ``body`` and ``text`` keep what the client sent.
    """
    object.__setattr__(request, "action", kmock.action.UPDATE)
    object.__setattr__(request, "data", ops)
    return request


SELECTABLE = {"metadata.name": "name", "metadata.namespace": "namespace"}


def _field_selector(request: kmock.Request) -> list[tuple[str, bool, str]]:
    """(metadata key, equal?, value) per term of ``fieldSelector`` this layer honours."""
    terms = []
    for term in filter(None, (request.params.get("fieldSelector") or "").split(",")):
        field, negated, value = term.partition("!=")
        equal = not negated
        if equal:
            field, _, value = term.partition("=")
            value = value.removeprefix("=")
        if field in SELECTABLE:
            terms.append((SELECTABLE[field], equal, value))
    return terms


def _selected(terms: list[tuple[str, bool, str]], body: dict[str, Any]) -> bool:
    metadata = body.get("metadata") or {}
    return all((metadata.get(key) == value) == equal for key, equal, value in terms)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def running_apiserver(*crds: dict[str, Any]) -> Iterator[tuple[ApiServer, str]]:
    """An ``ApiServer`` with K3s's built-in resources and ``crds``, served on 127.0.0.1 from a
    thread of its own; yields it and its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kmock-apiserver", daemon=True)
    thread.start()
    handler = ApiServer()
    with warnings.catch_warnings():  # kmock 0.8 reads its bundled file with a deprecated call
        warnings.simplefilter("ignore", DeprecationWarning)
        handler.resources.load_bundled()
    for crd in crds:
        handler.add_crd(crd)
    server = kmock.Server(handler, host="127.0.0.1")

    async def start() -> str:
        await handler.__aenter__()
        await server.__aenter__()
        return f"http://127.0.0.1:{server.port}"

    async def stop() -> None:
        try:
            await server.__aexit__(None, None, None)
        finally:
            await handler.__aexit__(None, None, None)

    try:
        url = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=15)
        try:
            yield handler, url
        finally:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig for ``url``; the token is only there because clients insist on one."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "smoke", "user": {"token": "smoke-test"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "smoke"}}],
        "current-context": "kmock",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
