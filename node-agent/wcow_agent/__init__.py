"""wcow-agent, the Windows node agent (docs/agent.md, docs/architecture.md), in rooms by job.

- ``loop/``: ``wcow-agent run``: the agent loop, the plan and rollout watches, reports to
  the Node, metrics, the startup taint; the ``Cluster`` protocol and its kubernetes adapter
  (``loop/kubernetes_cluster.py``, the only module importing the client);
- ``cycle/``: one reconcile (``NodeAgent``) and its steps: eligibility, the rollout's gate,
  the apply transaction, canaries, the pause image, letting go; the decisions, pure;
- ``config/``: what the agent writes beside containerd: config.toml merged (owned tables
  only, byte-preserving), the pause image key, the state file, atomic writes; what each
  containerd line honours;
- ``host/``: the real Windows adapters behind Protocols (service control, containerd,
  crictl, computecore.dll, file ACLs);
- ``simulator/``: a Windows node in memory (``wcow-agent simulate``, and the tests' host
  double) and a fleet of them;
- ``commands/``: one module per command of ``cli.py`` (``run``, ``merge``, ``uninstall``,
  ``canary``, ``simulate``).

Each room imports only the rooms listed after it (the simulator apart from ``host/``;
pyproject.toml's import contracts hold that).
"""
