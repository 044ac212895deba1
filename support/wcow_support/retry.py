"""One way to wait before trying again: a ``Backoff`` policy (delays that grow to a cap,
optionally spread by jitter) and ``retry``, which calls a function until it succeeds, fails
in a way not worth retrying, or runs out of attempts.

Loops that run forever (a watch, the reconcile loop) take ``delays()`` and start a fresh
sequence after a success; one call that may fail transiently (an API request) uses
``retry``. Neither knows what failed: the caller says which errors are worth retrying.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays of ``initial``, then each ``factor`` times the last, never above ``maximum``,
    each multiplied by a random factor in [1 - jitter, 1 + jitter] so that many clients
    failing together do not retry together. ``factor=1`` gives a fixed delay."""

    initial: float = 1.0
    maximum: float = 60.0
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.initial <= self.maximum or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"not a backoff: {self}")

    def delays(self) -> Iterator[float]:
        """The delays before each retry, without end."""
        delay = self.initial
        while True:
            spread = random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0  # noqa: S311 - jitter, not secrets
            yield delay * spread
            delay = min(delay * self.factor, self.maximum)


NO_DELAY = Backoff(initial=0.0, maximum=0.0, factor=1.0)


def retry(
    call: Callable[[], T],
    *,
    attempts: int,
    backoff: Backoff,
    retryable: Callable[[Exception], bool],
    wait_hint: Callable[[Exception], float | None] = lambda _error: None,
    on_retry: Callable[[int, Exception, float], None] = lambda _attempt, _error, _wait: None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """``call()``, tried up to ``attempts`` times while it raises an error ``retryable``
    accepts; the last error, or the first one not retryable, is raised as it is.

    Between attempts: the server's own hint when ``wait_hint`` finds one (e.g. Retry-After),
    else the next backoff delay (the sequence moves on either way). ``on_retry(attempt,
    error, wait)`` is told before each wait, with the number of the attempt to come."""
    delays = backoff.delays()
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as error:
            if attempt == attempts or not retryable(error):
                raise
            delay = next(delays)
            hint = wait_hint(error)
            wait = delay if hint is None else hint
            on_retry(attempt + 1, error, wait)
            (sleep or time.sleep)(wait)  # looked up now, so a test can replace time.sleep
    raise ValueError(f"retry needs at least one attempt, not {attempts}")
