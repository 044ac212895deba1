"""The simulator: Windows nodes without Windows (``wcow-agent simulate``), and the one
Windows-host double the tests use too.

- ``node``: a Windows node in memory (``SimulatedNode``: its disk, settings, faults and
  journal), whose ``host()`` implements the Protocols of ``wcow_agent.host`` with
  ``containerd`` (the service and its view of config.toml), ``cri`` (sandboxes and
  containers) and ``hcs`` (compute systems); ``faults``: what goes wrong on it;
- ``fleet``: N such nodes registered as Node objects, each running the real agent loop.

Shipped with the agent (the fleet tests and the rollout benchmark run it), kept apart from
the real Windows adapters in ``host/``, which never import it.
"""
