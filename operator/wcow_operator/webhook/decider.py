"""Each decision in a small pool of threads, off kopf's event loop, with a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wcow_operator.webhook.decision import Decision

# A decision takes well under 50 ms for any pod the API server can send (the pure decision
# walks bounded input); this deadline only guards against the unforeseen, and stays well
# inside the API server's timeoutSeconds (render.webhooks.TIMEOUT_SECONDS) so the pod gets
# a refusal that says why rather than a "context deadline exceeded".
DECISION_TIMEOUT_SECONDS = 2.0
IMAGE_WORKERS = 8  # with image checks: a decision may wait up to a second on a registry


class Decider:
    """Runs each decision in a small pool of threads, off kopf's event loop, with a deadline.

    The event loop keeps accepting and answering other admission requests while one is
    decided, and a decision past its deadline is answered with a refusal (DecisionTimeout)
    at once. A thread cannot be stopped, so a runaway decision would keep its worker: the
    pool is small, and the decision's own bounds (wcow_contract.quantity, the caps in
    webhook.pod_shape) keep every decision in milliseconds; no single step holds the
    interpreter lock for long, so the reconciler, Lease renewal and probes keep running.
    Threads rather than processes: the profiles need no pickling per request and nothing
    else is shared; a process pool would buy only killability, which the bounds make moot."""

    def __init__(self, workers: int = 2, timeout: float = DECISION_TIMEOUT_SECONDS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="admission")
        self.timeout = timeout

    async def decide(self, fn: Callable[..., Decision], *args: Any) -> Decision | None:
        """The decision, or None when it missed its deadline."""
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            return await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            return None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
