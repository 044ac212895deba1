"""The simulator: Windows nodes without Windows (``wcow-agent simulate``).

- ``host``: a Windows node in memory (containerd, CRI and HCS that follow config.toml on
  disk, with faults), implementing the Protocols of ``wcow_agent.host``;
- ``fleet``: N such nodes registered as Node objects, each running the real agent loop.

Shipped with the agent (the fleet tests and the rollout benchmark run it), kept apart from
the real Windows adapters in ``host/``, which never import it.
"""
