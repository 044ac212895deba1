"""The status of a WindowsRuntimeProfile, which only the operator writes: conditions, node
counts, the first failures and the rollout's progress."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, WithJsonSchema

from wcow_contract.v1alpha1.fields import MAX_STRING, Model
from wcow_contract.validation import DNS1123_SUBDOMAIN_MAX

ConditionStatus = Literal["True", "False", "Unknown"]


class RolloutStatus(Model):
    plan_hash: str
    """The plan being rolled out."""
    updated: int = 0
    """Windows nodes (with an agent) that run this plan."""
    total: int = 0
    """Windows nodes with an agent."""
    progress: str = ""
    """updated/total, for kubectl get."""
    state: Literal["Progressing", "Complete", "Halted"] = "Progressing"


class NodeCounts(Model):
    eligible: int = 0
    """Windows nodes whose build and features can run the handler."""
    ready: int = 0
    """Nodes whose agent applied the handler and passed the canary."""
    failed: int = 0
    """Nodes where applying or the canary failed."""


class NodeFailure(Model):
    node: Annotated[str, StringConstraints(max_length=DNS1123_SUBDOMAIN_MAX)]
    reason: Annotated[str, StringConstraints(max_length=128)]
    message: Annotated[str, StringConstraints(max_length=MAX_STRING)] = ""


class Condition(Model):
    """A status condition by the Kubernetes API conventions."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    status: ConditionStatus
    reason: Annotated[
        str, StringConstraints(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    ]
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    last_transition_time: Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class WindowsRuntimeProfileStatus(Model):
    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    # An atomic list, not x-kubernetes-list-type=map: the operator is its one writer and
    # always writes the whole list (a merge patch replaces arrays), so per-type ownership
    # in managedFields bought nothing, and tracking it cost kube-apiserver about a fifth of
    # each status write (benchmarks/write_costs.py; Kubernetes 1.35).
    conditions: Annotated[list[Condition], Field(max_length=16)] = []  # noqa: RUF012 - pydantic copies it
    handler: str | None = None
    runtime_class_name: str | None = None
    nodes: NodeCounts = NodeCounts()
    failures: Annotated[list[NodeFailure], Field(max_length=10)] = []  # noqa: RUF012 - pydantic copies it
    """The first nodes that failed, with the reason."""
    rollout: RolloutStatus | None = None
    """Progress of the last plan change that touched this profile's handler."""
