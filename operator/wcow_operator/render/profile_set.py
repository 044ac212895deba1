"""Everything a set of profiles renders to, all at once and all or nothing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile
from wcow_contract.wire.plan import Plan, plan_for
from wcow_operator.render.containerd import render_containerd_toml
from wcow_operator.render.runtimeclass import render_runtime_class

# Config versions whose fragments ``wcow render --out`` writes (4 is laid out as 3).
FRAGMENT_VERSIONS = (2, 3)


class ProfileConflictError(ValueError):
    """Profiles that cannot coexist (same name, or the same containerd handler)."""


def handler_conflicts(profiles: Iterable[Profile]) -> dict[str, list[str]]:
    """handler -> the profile names claiming it, for handlers claimed more than once."""
    claims: dict[str, list[str]] = defaultdict(list)
    for profile in profiles:
        claims[profile.handler].append(profile.name)
    return {handler: sorted(names) for handler, names in claims.items() if len(names) > 1}


@dataclass(frozen=True)
class Rendered:
    runtime_classes: list[dict[str, Any]]
    plan: Plan
    containerd_toml: dict[int, str]


def render_all(profiles: Sequence[Profile]) -> Rendered:
    """RuntimeClasses, plan and containerd fragments for these profiles, sorted by name."""
    names: dict[str, int] = defaultdict(int)
    for profile in profiles:
        names[profile.name] += 1
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise ProfileConflictError(f"profile names appear more than once: {', '.join(twice)}")
    conflicts = handler_conflicts(profiles)
    if conflicts:
        raise ProfileConflictError(
            "; ".join(
                f"handler {handler!r} is claimed by profiles {', '.join(names)}"
                for handler, names in sorted(conflicts.items())
            )
        )
    ordered = sorted(profiles, key=lambda p: p.name)
    plan = plan_for(ordered)
    tables = {handler: entry.runtime for handler, entry in plan.handlers.items()}
    return Rendered(
        runtime_classes=[render_runtime_class(profile) for profile in ordered],
        plan=plan,
        containerd_toml={v: render_containerd_toml(tables, v) for v in FRAGMENT_VERSIONS},
    )
