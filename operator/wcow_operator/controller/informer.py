"""Keep one collection of the cluster in the cache: list once, then watch.

The list is paged; the watch resumes from the last version it saw (bookmarks keep that
version fresh on quiet collections) and is reopened when the server ends it or the
connection fails, without a new list. Only when the server no longer has that version
(410 Gone) is the collection listed again. So a quiet cluster costs each collection one
open watch.

Written here rather than taken from kopf: kopf's watches hand whole objects to handlers and
say nothing about when the first listing is complete, while the controller must not plan
from a half-filled cache (a missing profile would look deleted), and Nodes must be watched
as metadata only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wcow_contract.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator.controller.cache import ClusterCache, kept
from wcow_operator.controller.cluster_api import ClusterApi, Watched, WatchExpiredError

log = logging.getLogger(__name__)

PAGE_SIZE = 500
WATCH_SECONDS = 300  # the server ends each watch after this; it is reopened from its version
RETRY_SECONDS = 5.0
WINDOWS_NODES = "kubernetes.io/os=windows"


def watched_collections(namespace: str) -> list[Watched]:
    return [
        Watched("profiles", f"/apis/{GROUP}/{VERSION}/{PLURAL}", PLURAL),
        Watched("runtimeclasses", "/apis/node.k8s.io/v1/runtimeclasses", "runtimeclasses"),
        Watched(
            "plan",
            f"/api/v1/namespaces/{namespace}/configmaps",
            "configmaps",
            field_selector=f"metadata.name={PLAN_CONFIGMAP}",
        ),
        Watched(
            "rollout",
            f"/api/v1/namespaces/{namespace}/configmaps",
            "configmaps",
            field_selector=f"metadata.name={ROLLOUT_CONFIGMAP}",
        ),
        Watched(
            "nodes", "/api/v1/nodes", "nodes", label_selector=WINDOWS_NODES, metadata_only=True
        ),
    ]


def list_all(
    api: ClusterApi, watched: Watched, page_size: int = PAGE_SIZE
) -> tuple[list[Any], str]:
    """Every object of the collection, page by page, and the version of the list."""
    items: list[Any] = []
    token: str | None = None
    while True:
        page = api.list_page(watched, token, page_size)
        items.extend(kept(watched.kind, item) for item in page.items)
        token = page.continue_token
        if not token:
            return items, page.resource_version


def run_informer(
    api: ClusterApi,
    watched: Watched,
    cache: ClusterCache,
    stop: threading.Event,
    *,
    on_list: Callable[[str], None] = lambda _kind: None,
    retry_seconds: float = RETRY_SECONDS,
    watch_seconds: int = WATCH_SECONDS,
) -> None:
    """Feed ``cache`` with ``watched`` until ``stop`` is set. A failed connection resumes
    the watch from the last version seen (as client-go's reflector does); only an expired
    version (410) lists again."""
    seen = _Seen()
    while not stop.is_set():
        try:
            if seen.version is None:
                items, seen.version = list_all(api, watched)
                on_list(watched.kind)
                cache.replace(watched.kind, items)
            _follow(api, watched, cache, stop, seen, watch_seconds=watch_seconds)
        except WatchExpiredError as expired:
            log.info("watch of %s expired (%s); listing again", watched.kind, expired)
            seen.version = None
        except Exception as error:  # noqa: BLE001 - a watch must survive any failure
            log.warning("watching %s: %s; retrying in %.0f s", watched.kind, error, retry_seconds)
            stop.wait(retry_seconds)


@dataclass
class _Seen:
    version: str | None = None  # the last resourceVersion seen; None: list first


def _follow(
    api: ClusterApi,
    watched: Watched,
    cache: ClusterCache,
    stop: threading.Event,
    seen: _Seen,
    *,
    watch_seconds: int,
) -> None:
    """One watch request from ``seen.version``, which moves on with every event."""
    for event in api.watch(watched, seen.version or "", watch_seconds):
        if stop.is_set():
            break
        kind = event.get("type")
        obj = event.get("object") or {}
        seen.version = str((obj.get("metadata") or {}).get("resourceVersion") or seen.version)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            cache.apply(watched.kind, kind, kept(watched.kind, obj))
