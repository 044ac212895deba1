"""Leader election on a coordination.k8s.io Lease, so only one replica reconciles."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2


def _lost_leadership() -> None:
    # Standard for controllers: a replica that lost its lease exits and restarts as a
    # follower, instead of risking two writers.
    log.error("lost the leader Lease; exiting so that another replica takes over")
    os._exit(1)


def run_with_leader_election(
    lease_name: str, namespace: str, identity: str, on_started: Callable[[], None]
) -> None:
    """Block, competing for the Lease; call ``on_started`` (in a thread) once leading."""
    lock = LeaseLock(lease_name, namespace, identity)  # type: ignore[no-untyped-call]
    config = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock,
        lease_duration=LEASE_SECONDS,
        renew_deadline=RENEW_DEADLINE_SECONDS,
        retry_period=RETRY_SECONDS,
        onstarted_leading=on_started,
        onstopped_leading=_lost_leadership,
    )
    log.info("waiting for the Lease %s/%s as %s", namespace, lease_name, identity)
    leaderelection.LeaderElection(config).run()  # type: ignore[no-untyped-call]
