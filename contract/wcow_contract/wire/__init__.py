"""The documents that travel between the operator and the node agents, or from either to the
cluster, each with its schema version (docs/architecture.md says what each side does with a
field or a version it does not know):

- ``plan``: what every node should configure (the plan ConfigMap), its handler tables as
  ``runtime_table`` makes them, hashed over ``canonical`` JSON; ``plan_check`` proves an entry
  is what the renderer makes of the spec it carries;
- ``rollout``: which nodes may change to the current plan (the rollout ConfigMap);
- ``agent_status``: what an agent reports on its Node (an annotation);
- ``uninstall``: the signal to uninstall, and what a clean Node is.
"""
