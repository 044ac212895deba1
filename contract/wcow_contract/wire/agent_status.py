"""What a node agent reports on its Node, and the operator reads back.

The agent writes this JSON into the Node annotation ``runtime.wcow.dev/agent-status`` and
sets the label ``runtime.wcow.dev/<handler>=ready`` for each handler whose canary passed.
The operator aggregates both into each profile's status. Both sides use this model, the
agent writes it with ``dump_agent_status`` and both read it with ``parse_agent_status``, so
the format cannot drift between them.

Schema skew (docs/architecture.md): unknown fields are ignored, so an operator reads the
reports of agents one version ahead that added a field; a report of another
``schemaVersion`` is unreadable, as a report that breaks the model is.

A node's report is a node's word: a compromised node (or a thief of the agent's token) can
write anything here. So the model bounds what it can say: reasons are CamelCase words,
handler names containerd handler names, the host build a Windows build, and every free text
is escaped (no control or format characters, see ``safe_text``) and bounded, so that one
node's text can never read as a line about another node in a condition message,
``status.failures`` or ``kubectl`` output. A report that breaks the rules is unreadable as a
whole (the node counts as reporting nothing), never partly believed.
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from wcow_contract.catalog.windows_builds import WINDOWS_VERSION_PATTERN
from wcow_contract.text import printable
from wcow_contract.validation import DNS1123_LABEL_MAX, DNS1123_LABEL_PATTERN

AGENT_STATUS_ANNOTATION = "runtime.wcow.dev/agent-status"
AGENT_STATUS_SCHEMA_VERSION: Final = 1

HandlerState = Literal["Ready", "Failed", "Pending", "NotEligible", "Conflict"]

GUEST_BUILD_UNSUPPORTED: Final = "GuestBuildUnsupported"
"""The reason of a Failed handler whose pods this node's pause image cannot start: a Hyper-V
class of a guest build the pause image does not boot, or a process class where the pause
image is of a build process isolation cannot run on this host. Applied, but its pods would
not run here. The node is not ready for it and not counted as eligible (a node pool of
another guest build), and the change counts as done there."""
CANNOT_RUN_HERE: Final = frozenset({GUEST_BUILD_UNSUPPORTED})
"""Reasons of a Failed handler that say what the node is, not what a change did to it: the
class cannot run there by design. Such a verdict never fails a change (``failed_change``)."""
REASON_PATTERN: Final = r"^[A-Z][A-Za-z0-9]*$"
REASON_MAX: Final = 64
MESSAGE_MAX: Final = 1024
MAX_HANDLERS: Final = 1024
MAX_GUEST_BUILDS: Final = 16


def _escaped(limit: int) -> BeforeValidator:
    return BeforeValidator(
        lambda value: printable(value, limit) if isinstance(value, str) else value
    )


Reason = Annotated[str, StringConstraints(pattern=REASON_PATTERN, max_length=REASON_MAX)]
Message = Annotated[str, _escaped(MESSAGE_MAX), StringConstraints(max_length=MESSAGE_MAX)]
ShortText = Annotated[str, _escaped(80), StringConstraints(max_length=80)]
BuildText = Annotated[str, StringConstraints(pattern=WINDOWS_VERSION_PATTERN)]
HandlerName = Annotated[
    str, StringConstraints(pattern=DNS1123_LABEL_PATTERN, max_length=DNS1123_LABEL_MAX)
]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class HandlerStatus(_Model):
    state: HandlerState
    """Ready: applied and the canary passed. Failed: applying or the canary failed.
    Pending: applied, canary not finished. NotEligible: this host cannot run it (build,
    Hyper-V). Conflict: config.toml has a table of that name the agent did not write."""
    reason: Reason
    """CamelCase cause, e.g. CanaryPassed, CanaryTimeout, HostBuildTooOld."""
    message: Message = ""
    profile_generation: int | None = None
    """The profile generation the agent applied (from the plan)."""
    canary_duration_seconds: float | None = None
    last_transition_time: ShortText | None = None


PlacementWay = Literal["DropIn", "Template", "Merge"]


class ConfigRewrite(_Model):
    """The last time the node rewrote containerd's configuration behind the agent (an AKS
    reimage, WMCO copying its file back, kube-up at boot, a hand edit) and the agent
    applied its handlers again."""

    reason: Reason
    """ConfigRewritten."""
    message: Message = ""
    """Which files, and what the agent wrote again."""
    time: ShortText | None = None


class PlacementStatus(_Model):
    """Where the agent puts its handlers on this node, and why (docs/agent.md, "Where the
    handlers go")."""

    way: PlacementWay | None = None
    """DropIn: its own drop-in file; Template: the template config.toml is rendered from;
    Merge: tables merged into config.toml; None: the agent cannot place handlers here."""
    reason: Reason
    """Why this way (DropInImported, RenderedFromTemplate, Containerd1Merge ...) or why none
    (SchemaV1Lost, ConfigVersionTooNew ...)."""
    message: Message = ""
    restart_required: bool | None = None
    """``--restart-mode none``: the files are written and containerd has not loaded them
    yet (its owner restarts it)."""
    last_rewrite: ConfigRewrite | None = None


class AgentStatus(_Model):
    schema_version: Literal[1] = AGENT_STATUS_SCHEMA_VERSION
    host_build: Annotated[str, StringConstraints(pattern=WINDOWS_VERSION_PATTERN)]
    """10.0.<build>, as the kubelet reports it."""
    hyperv_available: bool
    containerd_version: ShortText | None = None
    config_version: int | None = None
    """Schema version of the node's config.toml (2, 3 or 4)."""
    applied_plan_hash: ShortText | None = None
    attempted_plan_hash: ShortText | None = None
    """The plan the agent last tried to apply (equal to applied_plan_hash once it succeeded;
    the operator reads a difference as a failed attempt of the rollout)."""
    waiting: Message | None = None
    """Why the node has not changed to the current plan: the plan is paced and the rollout
    has not let this node in (it keeps its config.toml and its ready labels meanwhile).
    None when nothing waits. Optional: agents before the paced rollout never set it."""
    pause_image: Message | None = None
    """The node's pause (sandbox) image as containerd's config names it. Optional: agents
    from before the guest-build labels never set it."""
    guest_builds: Annotated[list[BuildText], Field(max_length=MAX_GUEST_BUILDS)] | None = None
    """The guest builds (10.0.<build>) this node's Hyper-V pods can boot: hcsshim boots a
    utility VM from the pause image's base layer, so the pause image's build, when the host
    has Hyper-V and is not older (docs/images.md, section 3). Empty: none; None: not known
    (the image could not be read, or an agent from before the guest-build labels)."""
    placement: PlacementStatus | None = None
    """Where the handlers go on this node. Optional: agents before placements never set it."""
    updated_at: ShortText | None = None
    handlers: Annotated[dict[HandlerName, HandlerStatus], Field(max_length=MAX_HANDLERS)] = {}


def failed_change(state: str, reason: str) -> bool:
    """Whether a handler's state says a change failed on the node (a canary that failed
    where the class belongs, containerd rolled back, a conflicting table), as the paced
    rollout counts failures. A node that cannot run the class by what it is (``NotEligible``,
    or Failed for a reason in ``CANNOT_RUN_HERE``) has not failed a change: it is done."""
    return state in ("Failed", "Conflict") and reason not in CANNOT_RUN_HERE


def dump_agent_status(status: AgentStatus) -> str:
    """The annotation's text: compact, key-sorted JSON without nulls, so the same status
    always gives the same text (and an unchanged status no write)."""
    return json.dumps(
        status.model_dump(by_alias=True, exclude_none=True),
        sort_keys=True,
        separators=(",", ":"),
    )


def parse_agent_status(raw: str | None) -> AgentStatus | None:
    """A Node's ``runtime.wcow.dev/agent-status``, or None when it is absent or breaks the
    model anywhere (read by the operator and by the agent, for its own last report)."""
    if not raw:
        return None
    try:
        return AgentStatus.model_validate_json(raw)
    except ValidationError:
        return None
