"""wcow-contract: what the operator and the node agent share, and nothing of either.

Depends on pydantic and the standard library only; imports neither ``wcow_operator`` nor
``wcow_agent`` (import-linter holds both ways). Two kinds of module:

- the profile (``v1alpha1`` and what validates it: ``errors``, ``validation``,
  ``windows_builds``, ``runhcs_options``, ``annotation_patterns``, ``hcs_annotations``,
  ``quantity``, ``text``), its CRD (``crd``, ``reference``) and ``conditions``;
- the wire formats between the two binaries, each with its schema version: the plan
  (``plan``, checked by ``plan_check``, its handler tables from ``runtime_table``, hashed over
  ``canonical``), the rollout ConfigMap (``rollout``), the agent-status annotation
  (``agent_status``) and the Node labels (``labels``). docs/architecture.md says what each
  side does with a field or a schema version it does not know.
"""
