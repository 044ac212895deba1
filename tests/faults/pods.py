"""Pods created through the webhook while a fault happens: what became of each creation."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import windows_pod
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION

LIMITS = {"cpu": "3", "memory": "3Gi"}  # sized by the webhook to 3 processors


@dataclass
class Burst:
    """Pods created one after another by a few threads until stopped; what became of each.
    ``timeout``: how long a creation may take before it counts as unanswered."""

    core: client.CoreV1Api
    ns: str
    runtime_class: str
    timeout: float = 10.0
    admitted: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    refused: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, worker: int) -> None:
        count = 0
        while not self.stop.is_set():
            count += 1
            name = f"burst-{worker}-{count}"
            body = windows_pod(name, self.runtime_class, limits=LIMITS)
            try:
                created = self.core.create_namespaced_pod(
                    self.ns, body, _request_timeout=self.timeout
                )
            except ApiException as error:
                self._note_refusal(f"{error.status} {error.body!s:.300}")
            except Exception as error:  # noqa: BLE001 - the server is down: no answer at all
                self._note_refusal(f"no answer: {type(error).__name__}")
            else:
                with self.lock:
                    self.admitted.append((time.time(), created.metadata.annotations or {}))
            self.stop.wait(0.05)

    def _note_refusal(self, reason: str) -> None:
        with self.lock:
            self.refused.append((time.time(), reason))

    def admitted_since(self, moment: float) -> int:
        with self.lock:
            return sum(1 for at, _ in self.admitted if at > moment)


@contextlib.contextmanager
def bursting(burst: Burst, workers: int) -> Iterator[Burst]:
    """``workers`` threads creating pods until the block ends."""
    threads = [threading.Thread(target=burst.run, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    try:
        yield burst
    finally:
        burst.stop.set()
        for thread in threads:
            thread.join(timeout=burst.timeout + 5)


def registered(kube: client.ApiClient, *classes: str) -> bool:
    """The webhook configurations' match conditions name every one of ``classes``."""
    hooks = client.AdmissionregistrationV1Api(kube).read_validating_webhook_configuration(
        WEBHOOK_CONFIGURATION
    )
    expression = hooks.webhooks[0].match_conditions[0].expression
    return all(f'"{name}"' in expression for name in classes)
