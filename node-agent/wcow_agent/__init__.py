"""wcow-agent, the Windows node agent (docs/agent.md).

- ``agent``: the decisions, pure (restarts, drift, canaries, Node status and labels);
- ``eligibility`` + ``containerd_lines``: which handlers this host can run (build,
  Hyper-V, and what its containerd line honours: the one version matrix);
- ``merge`` + ``tomltext``: config.toml merge (owned tables only, byte-preserving);
- ``apply``: one crash-safe cycle on the node (write, restart, roll back, prove);
- ``canary``: a pod sandbox per handler through CRI, checked through HCS;
- ``host/``: Windows behind Protocols (registry, containerd, crictl, computecore.dll);
- ``runner``: the ``run`` loop (plan watch, resync, drift checks, metrics, probes);
- ``cluster`` + ``k8s``: the Kubernetes boundary (``k8s`` is the only module importing
  the client);
- ``cli``: ``wcow-agent run | merge | uninstall | canary``.
"""
