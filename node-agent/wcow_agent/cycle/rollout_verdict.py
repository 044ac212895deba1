"""Paced rollout, the node's side: may this node change config.toml to the plan now?

The operator marks a plan it paces (``runtime.wcow.dev/rollout: paced`` on the plan
ConfigMap) and writes beside it the rollout ConfigMap naming the nodes that may change to
that plan (``wcow_contract.wire.rollout``). Pure: the cluster's view comes in as data, the
verdict goes out as data; ``rollout_gate.py`` acts on it.

The rules, in order:

1. A plan that is not marked paced (``wcow render`` output, GitOps without the operator)
   is applied at once.
2. A plan whose merge leaves config.toml as it is (every changed handler NotEligible here,
   or only a generation changed) is adopted: nothing is written or restarted.
3. A node the rollout names, for this very plan, changes.
4. A node that holds no table of the agent's yet (a new node) takes the plan at once.
5. Anyone else keeps what it has and says why it waits. A missing or unreadable rollout
   permits nobody: it must not open the gate.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from wcow_agent.config.merge import MergeResult
from wcow_contract.wire.rollout import (
    PACED_ANNOTATION,
    PACED_VALUE,
    ROLLOUT_CONFIGMAP,
    Rollout,
    may_change,
    parse_rollout,
)

SEEDED: Final = "seeded"

GateReason = Literal["Unpaced", "NoChange", "Permitted", "NewNode", "WaitingForRollout"]


def is_paced(annotations: Mapping[str, str] | None) -> bool:
    """Whether the plan ConfigMap's annotations ask for a paced rollout."""
    return (annotations or {}).get(PACED_ANNOTATION) == PACED_VALUE


@functools.lru_cache(maxsize=4)
def _parsed_rollout(text: str | None) -> Rollout | None:
    """``parse_rollout`` once per text: the watch and every cycle read the same rollout
    (the agent never changes the model it gets; with 200 simulated agents in one process,
    one parse serves them all)."""
    return parse_rollout(text)


@dataclass(frozen=True)
class Permission:
    """What the cluster says about pacing, as last seen: whether the plan is paced, and the
    rollout (None with ``problem`` saying why: missing, unreadable, cannot be read)."""

    paced: bool = False
    rollout: Rollout | None = None
    problem: str | None = None

    @classmethod
    def of(cls, paced: bool, exists: bool, text: str | None, namespace: str) -> Permission:
        source = f"ConfigMap {namespace}/{ROLLOUT_CONFIGMAP}"
        if not exists:
            return cls(paced, None, f"{source} does not exist")
        rollout = _parsed_rollout(text)
        if rollout is None:
            return cls(paced, None, f"{source} is missing or has an unreadable rollout.json")
        return cls(paced, rollout)

    def view(self, node: str) -> tuple[object, ...]:
        """What of the rollout matters to ``node``: a rollout change that leaves this as it
        was (another node let in) need not wake the node's loop."""
        rollout = self.rollout
        if rollout is None:
            return (self.paced, self.problem)
        halted = rollout.halted.message if rollout.halted is not None else None
        return (self.paced, rollout.plan_hash, rollout.permitted.get(node), halted)


@dataclass(frozen=True)
class Gate:
    allowed: bool
    reason: GateReason
    message: str
    grant: str | None = None
    """When the rollout let this node in (``Permitted``): a new grant for the same plan is
    the operator's resume, and lets the node try a file it rejected before once more."""


def holds_agent_tables(result: MergeResult, owned_before: Mapping[str, str]) -> bool:
    """Whether config.toml already has a handler table the agent wrote (kept, rewritten or
    to be removed), by the state or by the marker when the state was lost. Seeded built-in
    runtimes and tables adopted in this very merge do not count."""
    kept = {
        h
        for h, mark in result.owned.items()
        if mark != SEEDED and h not in result.added and h not in result.adopted
    }
    gone = {h for h in (*result.removed, *result.restored) if owned_before.get(h) != SEEDED}
    return bool(kept or gone)


def decide(
    permission: Permission,
    plan_hash: str,
    node: str,
    *,
    changes_file: bool,
    holds_tables: bool,
) -> Gate:
    """Whether ``node`` may change config.toml to the plan ``plan_hash`` now."""
    if not permission.paced:
        return Gate(True, "Unpaced", "the plan is not paced: applied at once")
    if not changes_file:
        return Gate(True, "NoChange", "the plan leaves config.toml as it is: adopted")
    rollout = permission.rollout
    if rollout is not None and may_change(rollout, plan_hash, node):
        return Gate(True, "Permitted", "the rollout lets this node in", rollout.permitted[node])
    if not holds_tables:
        return Gate(True, "NewNode", "the node holds none of the agent's tables yet")
    return Gate(False, "WaitingForRollout", waiting_message(permission, plan_hash))


def waiting_message(permission: Permission, plan_hash: str) -> str:
    """Why the node keeps its config.toml: stable while the rollout's view of this node
    is, so waiting writes the Node annotation once."""
    head = f"plan {plan_hash} waits for rollout permission"
    rollout = permission.rollout
    if rollout is None:
        return f"{head}: {permission.problem or 'no rollout'}; keeping the current config"
    if rollout.plan_hash != plan_hash:
        return f"{head}: the rollout is for plan {rollout.plan_hash}; keeping the current config"
    if rollout.halted is not None:
        return (
            f"{head}: the rollout is halted ({rollout.halted.reason}: "
            f"{rollout.halted.message}); keeping the current config"
        )
    return f"{head}: this node is not let in yet; keeping the current config"
