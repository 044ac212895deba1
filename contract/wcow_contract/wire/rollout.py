"""The rollout: which nodes may change their containerd config to the current plan.

The operator writes the plan (what every node should have) and, beside it, the ConfigMap
``wcow-runtime-rollout`` (who may change now). A node agent changes config.toml to a plan
only when the rollout is for that plan and names the node, so a change reaches at most
``maxUnavailable`` nodes at a time; while the operator is down nobody new gets permission.
Both sides use this model, so the format cannot drift between them.

Shape of ``data["rollout.json"]``::

    {"schemaVersion": 1,
     "planHash": "sha256:...",            # the plan this rollout is for
     "changedHandlers": ["hv", "proc"],   # what differs from the plan before it
     "maxUnavailable": 3,                 # nodes applying at once (resolved count)
     "permitted": {"node-a": "2026-11-23T08:00:00Z", ...},   # node -> granted at
     "halted": {"reason": "NodeFailed", "message": "...", "since": "...",
                "nodes": [{"node": "node-b", "reason": "CanaryFailed", "message": "..."}]},
     "resumedBy": "token",                # the resume annotation value last honoured
     "draining": {"node-c": "2026-11-23T08:00:00Z"},  # node -> drain began (absent: none)
     "held": {"hv": {"handler": "hv", "uid": "...", "generation": 4,   # profile -> hold
                     "planHash": "sha256:...", "entryHandler": "hv", "entry": {...} | null,
                     "resumedBy": "1", "reason": "NodeFailed", "message": "...",
                     "since": "...", "nodes": [...]}}}  # (absent: none)

``draining`` (optional, added within schema 1): nodes the operator is cordoning or
evicting before it lets them change; they count against ``maxUnavailable`` but may not
change yet. Left out when empty, so a rollout without drains keeps its released bytes.

``held`` (optional, added within schema 1, left out when empty the same way): profiles whose
change failed on a node and is held back. The operator keeps each one's last rolled-out
plan entry there (``entry``, for handler ``entryHandler``, which differs from ``handler``
when the change renamed it; null: it never rolled out, so the plan leaves it out) and puts
that entry in the plan instead of the failing one, so the failing change goes back off the
nodes that took it and every other profile's change goes on. A hold ends when the profile's
generation (``generation``) or its resume annotation (``resumedBy``) changes, or the
profile is deleted. Agents ignore it: the plan says what each node should have.

Schema skew (docs/architecture.md): unknown fields are ignored, so an agent reads the rollout
of an operator one version ahead that added a field; a rollout of another ``schemaVersion``
is unreadable, and an unreadable rollout lets nobody change.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from wcow_contract.v1alpha1 import NodeFailure
from wcow_contract.wire.canonical import canonical_json

ROLLOUT_CONFIGMAP: Final = "wcow-runtime-rollout"
ROLLOUT_KEY: Final = "rollout.json"
ROLLOUT_SCHEMA_VERSION: Final = 1
# On the plan ConfigMap: set by the operator, which paces. A plan without it (written by
# `wcow render` for GitOps without the operator) is applied by every node at once.
PACED_ANNOTATION: Final = "runtime.wcow.dev/rollout"
PACED_VALUE: Final = "paced"
# On a profile: a new value resumes a halted rollout (kubectl annotate --overwrite).
RESUME_ANNOTATION: Final = "runtime.wcow.dev/resume-rollout"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class Halt(_Model):
    reason: Annotated[str, Field(max_length=128)]
    message: Annotated[str, Field(max_length=1024)] = ""
    since: str
    nodes: list[NodeFailure] = []


class Hold(_Model):
    """A profile whose change is held back (see ``held`` above)."""

    handler: Annotated[str, Field(max_length=63)]
    """The handler the failing change is for."""
    uid: str | None = None
    generation: int | None = None
    """The profile's ``metadata.generation`` when it was held: a new one ends the hold."""
    plan_hash: str
    """The plan whose rollout failed with the held change."""
    entry_handler: Annotated[str, Field(max_length=63)] | None = None
    entry: dict[str, Any] | None = None
    """The profile's last rolled-out plan entry (for ``entry_handler``), the plan's until the
    hold ends (None: it never rolled out, and the plan leaves it out)."""
    resumed_by: str | None = None
    """The profile's resume annotation when it was held: a new value ends the hold."""
    reason: Annotated[str, Field(max_length=128)]
    message: Annotated[str, Field(max_length=1024)] = ""
    since: str
    nodes: list[NodeFailure] = []


class Rollout(_Model):
    schema_version: Literal[1] = ROLLOUT_SCHEMA_VERSION
    plan_hash: str
    changed_handlers: list[str] = []
    max_unavailable: Annotated[int, Field(ge=1)]
    permitted: dict[str, str] = {}
    halted: Halt | None = None
    resumed_by: str | None = None
    draining: dict[str, str] = {}
    held: dict[str, Hold] = {}


def dump_rollout(rollout: Rollout) -> str:
    """``rollout.json``: canonical JSON, so an unchanged rollout is an unchanged ConfigMap."""
    document = rollout.model_dump(by_alias=True, mode="json")
    if not rollout.draining:
        del document["draining"]  # the bytes of a rollout without drains, as released
    if not rollout.held:
        del document["held"]  # the same for one without holds
    return canonical_json(document).decode("utf-8")


def parse_rollout(text: str | None) -> Rollout | None:
    """The rollout in a ConfigMap's data, None when absent or unreadable (then nobody may
    change: an unreadable rollout must not open the gate)."""
    if not text:
        return None
    try:
        return Rollout.model_validate_json(text)
    except ValidationError:
        return None


def may_change(rollout: Rollout | None, plan_hash: str, node: str) -> bool:
    """Whether ``node`` may change its config.toml to the plan ``plan_hash``."""
    return rollout is not None and rollout.plan_hash == plan_hash and node in rollout.permitted
