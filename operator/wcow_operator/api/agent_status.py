"""What a node agent reports on its Node, and the operator reads back.

The agent writes this JSON into the Node annotation ``runtime.wcow.dev/agent-status`` and
sets the label ``runtime.wcow.dev/<handler>=ready`` for each handler whose canary passed.
The operator aggregates both into each profile's status. Both sides use this model, so
the format cannot drift between them.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

AGENT_STATUS_ANNOTATION = "runtime.wcow.dev/agent-status"
AGENT_STATUS_SCHEMA_VERSION: Final = 1

HandlerState = Literal["Ready", "Failed", "Pending", "NotEligible", "Conflict"]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class HandlerStatus(_Model):
    state: HandlerState
    """Ready: applied and the canary passed. Failed: applying or the canary failed.
    Pending: applied, canary not finished. NotEligible: this host cannot run it (build,
    Hyper-V). Conflict: config.toml has a table of that name the agent did not write."""
    reason: Annotated[str, Field(max_length=128)]
    """CamelCase cause, e.g. CanaryPassed, CanaryTimeout, HostBuildTooOld."""
    message: Annotated[str, Field(max_length=1024)] = ""
    profile_generation: int | None = None
    """The profile generation the agent applied (from the plan)."""
    canary_duration_seconds: float | None = None
    last_transition_time: str | None = None


class AgentStatus(_Model):
    schema_version: Literal[1] = AGENT_STATUS_SCHEMA_VERSION
    host_build: str
    """10.0.<build>, as the kubelet reports it."""
    hyperv_available: bool
    containerd_version: str | None = None
    config_version: int | None = None
    """Schema version of the node's config.toml (2, 3 or 4)."""
    applied_plan_hash: str | None = None
    attempted_plan_hash: str | None = None
    """The plan the agent last tried to apply (equal to applied_plan_hash once it succeeded;
    the operator reads a difference as a failed attempt of the rollout)."""
    waiting: Annotated[str, Field(max_length=1024)] | None = None
    """Why the node has not changed to the current plan: the plan is paced and the rollout
    has not let this node in (it keeps its config.toml and its ready labels meanwhile).
    None when nothing waits. Optional: agents before the paced rollout never set it."""
    updated_at: str | None = None
    handlers: dict[str, HandlerStatus] = {}
