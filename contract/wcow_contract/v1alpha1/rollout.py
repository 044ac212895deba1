"""spec.rollout: how a change of the profile's handler reaches the nodes (how many at once,
and what happens to their pods first)."""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import Field, WithJsonSchema, field_validator

from wcow_contract.v1alpha1.fields import Model
from wcow_contract.v1alpha1.label_selector import LabelSelector
from wcow_contract.v1alpha1.rules import MAX_UNAVAILABLE_PATTERN, MAX_UNAVAILABLE_RULES

Drain = Literal["None", "Cordon", "Evict"]
# Strongest first: a node's drain when several changed profiles disagree.
DRAIN_ORDER: Final[tuple[Drain, ...]] = ("Evict", "Cordon", "None")


class RolloutSpec(Model):
    """How a change of this profile's handler reaches the nodes."""

    max_unavailable: (
        Annotated[
            int | str,
            WithJsonSchema(
                {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-validations": MAX_UNAVAILABLE_RULES,
                }
            ),
        ]
        | None
    ) = None
    """Nodes that may apply a change at once: a count (at least 1) or a percentage of the
    Windows nodes with an agent, rounded up ("10%"). Default: the operator's
    --max-unavailable. When one plan change touches several profiles, the smallest wins."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | str | None):
            raise ValueError(f"must be a count or a percentage such as '10%', got {value!r}")  # noqa: TRY004 - pydantic reports ValueError
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        if isinstance(value, str) and not re.fullmatch(MAX_UNAVAILABLE_PATTERN, value):
            raise ValueError(f"must be a count or a percentage from 1% to 100%, got {value!r}")
        return value

    drain: Drain | None = None
    """What happens to a node's pods before its containerd restarts for a change of this
    profile: None (they keep running; see the README's drain section for what a restart
    does to them), Cordon (no new pods are scheduled to the node while it applies; it is
    uncordoned after, also after a failure), or Evict (cordon, then evict this class's pods
    through the Eviction API, honouring PodDisruptionBudgets, and wait until they are gone).
    Default: the operator's --drain. When one node takes changes of several profiles, the
    strongest wins (Evict, then Cordon, then None)."""
    drain_timeout_seconds: Annotated[int, Field(ge=30, le=86400)] | None = None
    """With Evict: how long a node's pods may take to leave (an eviction refused by a
    PodDisruptionBudget is retried until then); past it the node fails its turn with reason
    DrainTimeout and the rollout halts. Default 600."""
    evict_pod_selector: LabelSelector | None = None
    """With Evict: only pods of this class whose labels match are evicted (others keep
    running through the restart). Omitted: every pod of the class on the node."""
