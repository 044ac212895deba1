"""Executes reconcile outcomes against a ClusterApi, in batches, with metrics."""
