"""Image lookups for admission: a bounded cache in front of the registry client, and lookups
in parallel under one deadline per pod (``webhook.image_admission`` decides with them).

The webhook decides each pod in the ``Decider``'s threads with a 2 s deadline
(``webhook.decider.DECISION_TIMEOUT_SECONDS``); a pod's lookups together get at most
``LOOKUP_TIMEOUT_SECONDS`` (1 s by default), so a slow registry costs the pod a warning, never
a ``DecisionTimeout``. Answers are cached by reference (a tag for ``TAG_TTL``, a digest, which
never changes, for ``DIGEST_TTL``; the entries of an index are cached by their own digest too,
so the validating webhook and later pods of the pinned image read nothing), failures for
``FAILURE_TTL`` so that a registry that is down is not asked again by every pod.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Final, Protocol

from wcow_operator.registry.facts import Facts, ImageFacts, LookupFailure

LOOKUP_TIMEOUT_SECONDS: Final = 1.0
CACHE_ENTRIES: Final = 2048
TAG_TTL: Final = 300.0  # a tag can move: looked up again after five minutes
DIGEST_TTL: Final = 3600.0
FAILURE_TTL: Final = 10.0


class Lookup(Protocol):
    def lookup(self, text: str, timeout: float) -> Facts: ...


class FactsCache:
    """Least recently used, at most ``size`` entries, each until its own expiry."""

    def __init__(self, size: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic):
        self._size, self._clock = size, clock
        self._entries: OrderedDict[str, tuple[float, Facts]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Facts | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[0] <= self._clock():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: str, facts: Facts, ttl: float) -> None:
        with self._lock:
            self._entries[key] = (self._clock() + ttl, facts)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _ttl(reference: str, facts: Facts) -> float:
    if isinstance(facts, LookupFailure):
        return FAILURE_TTL
    return DIGEST_TTL if "@" in reference else TAG_TTL


class Resolver:
    """Looks up references in parallel (``workers`` threads shared by all pods), each pod's
    set under one deadline; the cache answers what it knows without a thread."""

    def __init__(
        self,
        client: Lookup,
        timeout: float = LOOKUP_TIMEOUT_SECONDS,
        cache: FactsCache | None = None,
        workers: int = 8,
    ) -> None:
        self.client, self.timeout = client, timeout
        self.cache = cache or FactsCache()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="registry")

    def resolve(self, wanted: Iterable[str]) -> dict[str, Facts]:
        found: dict[str, Facts] = {}
        pending: dict[str, Future[Facts]] = {}
        for reference in wanted:
            cached = self.cache.get(reference)
            if cached is not None:
                found[reference] = cached
            else:
                pending[reference] = self._pool.submit(self._lookup, reference)
        if pending:
            wait(pending.values(), timeout=self.timeout)
        for reference, future in pending.items():
            if future.done():
                found[reference] = future.result()
            else:
                future.cancel()
                found[reference] = LookupFailure(
                    "Timeout", f"no answer from the registry within {self.timeout:g} s"
                )
        return found

    def _lookup(self, reference: str) -> Facts:
        facts = self.client.lookup(reference, self.timeout)
        self.cache.put(reference, facts, _ttl(reference, facts))
        if isinstance(facts, ImageFacts) and facts.index:
            for entry in facts.entries:  # what a pinned reference will ask for
                pinned = f"{facts.repository}@{entry.digest}"
                child = ImageFacts(facts.repository, entry.digest, False, (entry,))
                if entry.platform is not None:
                    self.cache.put(pinned, child, DIGEST_TTL)
        return facts

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
