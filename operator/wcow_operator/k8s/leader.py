"""Leader election on a coordination.k8s.io Lease, so only one replica reconciles.

Built on kubernetes.leaderelection, made safe where it is not: its Lease calls have no
timeout and catch only ApiException (a dropped connection would end the election thread while
the reconciler kept writing), so calls here time out, every error counts as a failed renewal,
and a watchdog exits the process once the Lease has not been renewed for a lease period.
A replica that is not sure it leads must not write: it exits and restarts as a follower.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2
CALL_TIMEOUT_SECONDS = 5


class _TimedCalls:
    """CoordinationV1Api with a request timeout on every call."""

    def __init__(self, api: client.CoordinationV1Api, timeout: float) -> None:
        self._api = api
        self._timeout = timeout

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = getattr(self._api, name)
        return lambda *args, **kwargs: call(*args, _request_timeout=self._timeout, **kwargs)


class SafeLeaseLock(LeaseLock):
    """A LeaseLock whose calls time out, whose every error is a failed attempt, and which
    remembers when it last held the Lease (``last_renewed``, monotonic seconds)."""

    def __init__(self, name: str, namespace: str, identity: str) -> None:
        super().__init__(name, namespace, identity)  # type: ignore[no-untyped-call]
        self.api_instance: Any = _TimedCalls(client.CoordinationV1Api(), CALL_TIMEOUT_SECONDS)
        self.last_renewed: float | None = None

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        try:
            found: tuple[bool, Any] = super().get(name, namespace)  # type: ignore[no-untyped-call]
        except Exception as error:  # noqa: BLE001 - any failure is "could not read"
            log.warning("reading the Lease failed: %s", error)
            return False, error
        return found

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        return self._attempt("creating", super().create, name, namespace, election_record)

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        return self._attempt("renewing", super().update, name, namespace, updated_record)

    def _attempt(self, what: str, call: Callable[..., bool], *args: Any) -> bool:
        try:
            held = bool(call(*args))
        except Exception as error:  # noqa: BLE001 - any failure is a failed attempt
            log.warning("%s the Lease failed: %s", what, error)
            return False
        if held:
            self.last_renewed = time.monotonic()
        return held


def _exit(reason: str) -> None:
    log.error("%s; exiting so that another replica takes over", reason)
    os._exit(1)


def _watchdog(lock: SafeLeaseLock, leading: threading.Event) -> None:
    while True:
        time.sleep(1)
        renewed = lock.last_renewed
        if leading.is_set() and renewed is not None and time.monotonic() - renewed > LEASE_SECONDS:
            _exit(f"the Lease was not renewed for {LEASE_SECONDS} s")


class LeaseElection:
    """Competes for the Lease (``compete``) and watches that it stays renewed
    (``watchdog``), each in a thread of the supervisor's; ``leading`` is set once this
    replica holds the Lease, and never cleared: losing it ends the process."""

    def __init__(self, lease_name: str, namespace: str, identity: str) -> None:
        self.lock = SafeLeaseLock(lease_name, namespace, identity)
        self.leading = threading.Event()
        self._where = f"{namespace}/{lease_name}"
        self._identity = identity

    def compete(self) -> None:
        """Block, competing for the Lease. Never returns while leading: losing the Lease, or
        any failure here, ends the process."""
        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            self.lock,
            lease_duration=LEASE_SECONDS,
            renew_deadline=RENEW_DEADLINE_SECONDS,
            retry_period=RETRY_SECONDS,
            onstarted_leading=self.leading.set,
            onstopped_leading=lambda: _exit("lost the leader Lease"),
        )
        log.info("waiting for the Lease %s as %s", self._where, self._identity)
        try:
            leaderelection.LeaderElection(config).run()  # type: ignore[no-untyped-call]
        except Exception:
            log.exception("leader election failed")
        _exit("leader election stopped")

    def watchdog(self) -> None:
        _watchdog(self.lock, self.leading)
