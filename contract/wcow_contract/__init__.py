"""wcow-contract: what the operator and the node agent share, and nothing of either.

Depends on pydantic and the standard library only; imports neither ``wcow_operator`` nor
``wcow_agent``, nor the plumbing both run on (``wcow_support``); import-linter holds all three.
Types and formats, no machinery:

- ``v1alpha1``: the WindowsRuntimeProfile API (its types, CEL rules and schema hooks);
- ``wire``: the documents between the two binaries and the cluster, each with its schema
  version: the plan, the rollout, the agent status, the uninstall signal;
- ``catalog``: facts about upstream, with their sources: Windows builds, runhcs options,
  hcsshim's annotations, the annotation-key grammar of allow-list patterns;
- ``labels``: the Node labels an agent sets and the operator reads;
- ``conditions`` (the one way to set one) and ``condition_table`` (every type and reason);
- ``crd`` and ``reference``: the CRD and its Markdown reference, generated from ``v1alpha1``;
- ``errors``: a profile document into a model, or problems that name field and value;
- ``validation`` and ``quantity``: Kubernetes' name, label and quantity grammars;
- ``text``: untrusted text made safe to show.

docs/architecture.md says what each side does with a field or a schema version it does not
know.
"""
