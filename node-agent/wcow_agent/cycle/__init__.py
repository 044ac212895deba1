"""One reconcile cycle on the node (``node_agent.NodeAgent``) and its steps.

- ``decisions``: the cycle's decisions, pure (restarts, drift, canaries, the Node's status
  and labels), and ``CycleReport``, what a cycle found and did;
- ``eligibility``: which handlers this host can run;
- ``rollout_verdict`` (pure) and ``rollout_gate``: may the node change to the plan now (the
  paced rollout), and the record of its attempts;
- ``transaction``: the change as one crash-safe transaction (preflight, write, restart,
  rollback, recovery);
- ``proving``: a canary per changed handler (``canary``: a pod sandbox through CRI,
  checked through HCS);
- ``pause_image`` and ``pause_change``: the node's pause image, and a change of it held
  until proven;
- ``adoptions`` and ``host_cleanup``: adopted tables said out loud, and letting go of the
  host (``wcow-agent uninstall``).
"""
