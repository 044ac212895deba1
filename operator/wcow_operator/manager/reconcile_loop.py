"""The reconcile loop's thread and the leader election it waits for: only the leader runs
passes; every replica keeps its cache warm and serves the webhook."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from wcow_operator.controller.runner import Runner
from wcow_operator.k8s.leader import LeaseElection
from wcow_operator.rbac import OPERATOR_LEASE
from wcow_operator.settings import OperatorSettings
from wcow_support.supervisor import Supervisor

log = logging.getLogger("wcow_operator")

LAST_PASS_SECONDS = 10.0  # at shutdown, a pass in flight may finish its writes this long


def start_election(
    supervisor: Supervisor, settings: OperatorSettings, identity: str
) -> threading.Event:
    """Set once this replica may reconcile: at once without leader election."""
    if not settings.leader_election:
        elected = threading.Event()
        elected.set()
        return elected
    election = LeaseElection(OPERATOR_LEASE, settings.namespace, identity)
    supervisor.start("lease-watchdog", election.watchdog)
    supervisor.start("leader-election", election.compete)
    return election.leading


@dataclass(frozen=True)
class Reconciler:
    """The reconcile loop's thread: waits for the Lease (no wait without leader election),
    then runs passes until stopped; a pass in flight finishes its writes."""

    runner: Runner
    elected: threading.Event
    leading: threading.Event  # what the probes read: this replica reconciles
    stopping: threading.Event

    def run(self) -> None:
        while not self.runner.clock.wait(self.elected, 0.2):
            if self.stopping.is_set():
                return
        self.leading.set()
        controller = self.runner.controller
        controller.metrics.leader.set(1)
        log.info("reconciling as %s", controller.instance)
        try:
            self.runner.run(self.stopping)
        finally:
            controller.close()

    def stop(self) -> None:
        self.stopping.set()
        self.runner.trigger()  # wake it from its wait for the next pass


def start_reconciling(
    supervisor: Supervisor,
    runner: Runner,
    settings: OperatorSettings,
    identity: str,
    leading: threading.Event,
) -> None:
    """The reconcile loop's thread, which runs passes once this replica leads (``leading``
    set then, for the probes)."""
    elected = start_election(supervisor, settings, identity)
    reconciler = Reconciler(runner, elected, leading, supervisor.stopping)
    supervisor.start("reconciler", reconciler.run, stop=reconciler.stop, grace=LAST_PASS_SECONDS)
