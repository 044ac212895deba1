"""wcow-agent, the Windows node agent (docs/agent.md, docs/architecture.md).

- ``runner``: the ``run`` loop (plan and rollout watches in ``watch``, resync, drift checks,
  reports to the Node, metrics, probes);
- ``cycle``: one cycle (``NodeAgent``): host facts, state, judge the plan for this host,
  then the rooms below;
- ``gate``: may the node change to the plan now (paced rollout), and the record of its
  attempts at a plan (``pacing``: the pure verdict);
- ``attempt``: the change as one crash-safe transaction (preflight, write, restart,
  rollback, recovery);
- ``proving``: a canary per changed handler (``canary``: a pod sandbox through CRI, checked
  through HCS);
- ``uninstall``: adopted tables said out loud, and ``wcow-agent uninstall``;
- ``state``: what the agent remembers beside config.toml, changed in named steps, written
  in one place;
- ``agent``: the decisions, pure (restarts, drift, canaries, Node status and labels);
- ``eligibility`` + ``containerd_lines``: which handlers this host can run (build, Hyper-V,
  and what its containerd line honours: the one version matrix);
- ``merge`` + ``tomltext``: config.toml merge (owned tables only, byte-preserving);
- ``plan``: the plan read and checked (``wcow_contract.wire.plan``);
- ``host/``: the real Windows adapters behind Protocols (registry, containerd, crictl,
  computecore.dll); ``simulate/``: a Windows node in memory and ``wcow-agent simulate``;
- ``cluster`` + ``k8s``: the Kubernetes boundary (``k8s`` is the only module importing
  the client);
- ``cli``: ``wcow-agent run | merge | uninstall | canary | simulate``.
"""
