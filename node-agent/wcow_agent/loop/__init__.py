"""The run loop (``wcow-agent run``) and its Kubernetes boundary.

- ``agent_loop``: ``AgentLoop``, one cycle at a time, each reported to the Node (labels,
  status annotation, events), with resyncs, drift checks and probes;
- ``cluster_view``: the plan and rollout watches (``ClusterView``) that wake it;
- ``plan_loading``: the plan ConfigMap's text read and checked;
- ``cluster``: the ``Cluster`` protocol the loop talks through; ``kubernetes_cluster``: its
  adapter, the only module importing the kubernetes client;
- ``metrics``, ``startup_taint``, ``node_cleanup``: what else the loop writes.
"""
