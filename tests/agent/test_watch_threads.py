"""The agent's watch threads (plan, rollout) outlive any failure: a thread that ended would
leave the node on the last rollout it saw, never let in again."""

from __future__ import annotations

import threading

from tests.agent.fakes import FakeCluster
from wcow_agent.loop.cluster import RolloutObject
from wcow_agent.loop.cluster_view import ClusterView, RunOptions
from wcow_agent.loop.metrics import Metrics


class FailingOnce(FakeCluster):
    """The first read of the rollout fails with something that is not a ClusterError."""

    def get_rollout(self, namespace: str) -> RolloutObject:
        self.rollout_reads += 1
        if self.rollout_reads == 1:
            raise RuntimeError("an unforeseen failure")
        return self.rollout


def test_the_rollout_watch_survives_an_unexpected_error_and_reads_again() -> None:
    cluster = FailingOnce()
    cluster.set_rollout('{"schemaVersion": 1}')
    stop, wake = threading.Event(), threading.Event()
    view = ClusterView(cluster, RunOptions(node_name="win-1"), Metrics(), stop, wake)
    thread = threading.Thread(target=view.watch_rollout_forever, daemon=True)
    thread.start()
    try:
        assert wake.wait(timeout=10), "the rollout was never read after the failure"
        assert thread.is_alive()
        assert cluster.rollout_reads >= 2
        with view._lock:
            assert view._rollout is cluster.rollout
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
