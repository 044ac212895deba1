"""Image lookups for admission: a bounded cache in front of the registry client, lookups in
parallel under one deadline per pod, and budgets per tenant.

The webhook decides each pod in the ``Decider``'s threads with a 2 s deadline
(``webhook.decider.DECISION_TIMEOUT_SECONDS``); a pod's lookups together get at most
``LOOKUP_TIMEOUT_SECONDS`` (1 s by default), and every lookup ends at its own deadline
whatever the registry does (``transport``), so a slow registry costs the pod a warning,
never a ``DecisionTimeout``.

No tenant holds more than its share (the budgets, ``Budget``): a namespace has at most
``WAITING_PER_NAMESPACE`` pods waiting on registries at once and ``LOOKUPS_PER_NAMESPACE``
lookups in flight, a pod starts at most ``LOOKUPS_PER_POD``, one registry host takes at most
``LOOKUPS_PER_HOST`` of the ``WORKERS``; what a budget does not let start is ``Busy`` for that
pod only (admitted unchecked, or refused where its class says so). A server-side dry run
never waits on a registry: it is answered from the cache. Lookups of the same reference in
flight are shared.

Answers are cached by reference and by the credential a pod may read it with (an answer
read with one team's credentials never answers another team), a tag for ``TAG_TTL``, a
digest, which never changes, for ``DIGEST_TTL`` (the entries of an index are cached by their
own digest too, so the validating webhook and later pods of the pinned image read nothing),
failures for ``FAILURE_TTL`` so that a registry that is down is not asked again by every pod.
Each namespace holds at most ``CACHE_PER_NAMESPACE`` entries: a flood of references from one
tenant evicts its own answers, not another's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Final, Protocol

from wcow_contract.text import shown
from wcow_operator.registry.facts import Facts, ImageFacts, LookupFailure

LOOKUP_TIMEOUT_SECONDS: Final = 1.0
CACHE_ENTRIES: Final = 2048
CACHE_PER_NAMESPACE: Final = 256
TAG_TTL: Final = 300.0  # a tag can move: looked up again after five minutes
DIGEST_TTL: Final = 3600.0
FAILURE_TTL: Final = 10.0
WORKERS: Final = 16
WAITING_PER_NAMESPACE: Final = 2
LOOKUPS_PER_NAMESPACE: Final = 4
LOOKUPS_PER_POD: Final = 4
LOOKUPS_PER_HOST: Final = 8
SHARED: Final = ""  # the owner of entries no namespace asked for (wcow admit, tests)


class Lookup(Protocol):
    def lookup(self, text: str, timeout: float, namespace: str | None = None) -> Facts: ...


class FactsCache:
    """Least recently used, at most ``size`` entries and ``per_owner`` of each owner (the
    namespace whose pod asked), each until its own expiry."""

    def __init__(
        self,
        size: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        per_owner: int = CACHE_PER_NAMESPACE,
    ) -> None:
        self._size, self._clock, self._per_owner = size, clock, per_owner
        self._entries: OrderedDict[str, tuple[float, Facts, str]] = OrderedDict()
        self._owned: Counter[str] = Counter()
        self._lock = threading.Lock()

    def get(self, key: str) -> Facts | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[0] <= self._clock():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: str, facts: Facts, ttl: float, owner: str = SHARED) -> None:
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (self._clock() + ttl, facts, owner)
            self._owned[owner] += 1
            if self._owned[owner] > self._per_owner:
                oldest = next(k for k, v in self._entries.items() if v[2] == owner)
                self._drop(oldest)
            while len(self._entries) > self._size:
                self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        _, _, owner = self._entries.pop(key)
        self._owned[owner] -= 1
        if not self._owned[owner]:
            del self._owned[owner]

    def __len__(self) -> int:
        return len(self._entries)


def _ttl(reference: str, facts: Facts) -> float:
    if isinstance(facts, LookupFailure):
        return FAILURE_TTL
    return DIGEST_TTL if "@" in reference else TAG_TTL


class Budget:
    """Counted slots by key (a namespace, a host), each key at most ``limit`` at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, key: str) -> bool:
        with self._lock:
            if self._held[key] >= self.limit:
                return False
            self._held[key] += 1
            return True

    def give(self, key: str) -> None:
        with self._lock:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]

    def held(self, key: str) -> int:
        with self._lock:
            return self._held[key]


def _host(reference: str) -> str:
    first, _, rest = reference.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else ""


class Resolver:
    """Looks up references in parallel (``workers`` threads shared by all pods, within the
    budgets), each pod's set under one deadline; the cache answers what it knows without a
    thread."""

    def __init__(
        self,
        client: Lookup,
        timeout: float = LOOKUP_TIMEOUT_SECONDS,
        cache: FactsCache | None = None,
        workers: int = WORKERS,
    ) -> None:
        self.client, self.timeout = client, timeout
        self.cache = cache or FactsCache()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="registry")
        self.waiting = Budget(WAITING_PER_NAMESPACE)
        self.namespaces = Budget(LOOKUPS_PER_NAMESPACE)
        self.hosts = Budget(LOOKUPS_PER_HOST)
        self.workers = Budget(workers)
        self._flight: dict[str, Future[Facts]] = {}
        self._lock = threading.Lock()

    def key(self, reference: str, namespace: str | None) -> str:
        """The cache key: the reference, and the credential a pod of ``namespace`` would
        read it with (none: anonymous, shared by every namespace without one)."""
        credential = getattr(self.client, "credential", None)
        scope = credential(reference, namespace) if credential is not None else None
        return f"{reference}\n{reference.partition('/')[0] if scope else ''}"

    def resolve(
        self, wanted: Iterable[str], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Facts]:
        """The facts of each reference for a pod of ``namespace``; a dry run reads only the
        cache."""
        found: dict[str, Facts] = {}
        missing: dict[str, str] = {}
        for reference in wanted:
            key = self.key(reference, namespace)
            cached = self.cache.get(key)
            if cached is not None:
                found[reference] = cached
            else:
                missing[reference] = key
        if not missing:
            return found
        owner = namespace or SHARED
        if dry_run:
            return found | {r: _dry_run(r) for r in missing}
        if not self.waiting.take(owner):
            return found | {r: _busy(r, "pods of this namespace already wait") for r in missing}
        try:
            found |= self._lookups(missing, namespace, owner)
        finally:
            self.waiting.give(owner)
        return found

    def _lookups(
        self, missing: Mapping[str, str], namespace: str | None, owner: str
    ) -> dict[str, Facts]:
        found: dict[str, Facts] = {}
        pending: dict[str, Future[Facts]] = {}
        started = 0
        for reference, key in missing.items():
            with self._lock:
                shared = self._flight.get(key)
            if shared is not None:  # the same lookup for another pod: wait for it too
                pending[reference] = shared
                continue
            if started >= LOOKUPS_PER_POD:
                found[reference] = _busy(reference, "this pod has enough lookups running")
                continue
            started += 1
            begun = self._start(reference, key, namespace, owner)
            if isinstance(begun, str):
                found[reference] = _busy(reference, begun)
            else:
                pending[reference] = begun
        if pending:
            wait(pending.values(), timeout=self.timeout)
        for reference, future in pending.items():
            found[reference] = (
                future.result()
                if future.done()
                else LookupFailure(
                    "Timeout", f"no answer from the registry within {self.timeout:g} s"
                )
            )
        return found

    def _start(
        self, reference: str, key: str, namespace: str | None, owner: str
    ) -> Future[Facts] | str:
        """A lookup in a worker, its slots held until it really ends; or why not."""
        host = _host(reference)
        taken: list[tuple[Budget, str]] = []
        for budget, slot, why in (
            (self.namespaces, owner, "this namespace has enough lookups running"),
            (self.hosts, host, "its registry has enough lookups running"),
            (self.workers, SHARED, "every lookup worker is busy"),
        ):
            if not budget.take(slot):
                for held, name in taken:
                    held.give(name)
                return why
            taken.append((budget, slot))

        def run() -> Facts:
            try:
                return self._lookup(reference, key, namespace, owner)
            finally:
                for held, name in taken:
                    held.give(name)
                with self._lock:
                    self._flight.pop(key, None)

        with self._lock:
            future = self._pool.submit(run)
            self._flight[key] = future
        return future

    def _lookup(self, reference: str, key: str, namespace: str | None, owner: str) -> Facts:
        facts = self.client.lookup(reference, self.timeout, namespace)
        self.cache.put(key, facts, _ttl(reference, facts), owner)
        if isinstance(facts, ImageFacts) and facts.index:
            scope = key.partition("\n")[2]
            for entry in facts.entries:  # what a pinned reference will ask for
                pinned = f"{facts.repository}@{entry.digest}"
                child = ImageFacts(facts.repository, entry.digest, False, (entry,))
                if entry.platform is not None:
                    self.cache.put(f"{pinned}\n{scope}", child, DIGEST_TTL, owner)
        return facts

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _busy(reference: str, why: str) -> LookupFailure:
    return LookupFailure("Busy", f"{shown(reference, 120)} was not looked up now: {why}")


def _dry_run(reference: str) -> LookupFailure:
    return LookupFailure(
        "DryRun", "a server-side dry run is answered from the cache and never waits on a registry"
    )
