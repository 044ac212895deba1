"""The live profiles as one pass reads them: each spec parsed (or why it is invalid), the last
good plan entry an invalid one keeps, and which handlers more than one profile claims.

The first step of ``reconcile``: every later step reads ``Profiles`` and changes nothing in
it. ``Memo`` carries what earlier passes worked out, so that a pass over hundreds of profiles
parses again only those that changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import WindowsRuntimeProfile, WindowsRuntimeProfileStatus
from wcow_contract.wire.plan import PlanEntry, plan_entry
from wcow_contract.wire.plan_check import EntryRefusedError, checked_entry
from wcow_contract.wire.rollout import RESUME_ANNOTATION
from wcow_operator.reconcile.holds import Claim
from wcow_operator.reconcile.model import Observed, ObservedProfile, ReconcileSettings

# (the parsed spec, or None and why it is invalid)
Parsed = tuple[WindowsRuntimeProfile | None, tuple[str, ...]]


@dataclass(frozen=True)
class ProfileState:
    """One live profile during a pass: what its spec parses to, and, for an invalid spec,
    the (handler, entry) of the plan that the operator may keep for it."""

    observed: ObservedProfile
    inputs: Any  # all that parsing read (``parse_inputs``): the status memo's key
    model: WindowsRuntimeProfile | None = None
    problems: tuple[str, ...] = ()
    last_good: tuple[str, PlanEntry] | None = None

    @property
    def name(self) -> str:
        return self.observed.name

    @property
    def claimed_handler(self) -> str | None:
        if self.model is not None:
            return self.model.handler
        return self.last_good[0] if self.last_good else None

    @property
    def resume(self) -> str | None:
        """Its resume annotation's value (``kubectl annotate wrp NAME RESUME_ANNOTATION=``)."""
        annotations: dict[str, str] = self.observed.metadata.get("annotations") or {}
        return annotations.get(RESUME_ANNOTATION)

    @cached_property
    def current_status(self) -> WindowsRuntimeProfileStatus | None:
        """The status the profile carries, read once a pass (None: unreadable)."""
        try:
            return WindowsRuntimeProfileStatus.model_validate(self.observed.status)
        except ValidationError:
            return None


@dataclass(frozen=True)
class Profiles:
    """The live profiles (not being deleted) in the order observed, and the handlers that
    more than one of them claims (handler -> the names claiming it, sorted)."""

    live: tuple[ProfileState, ...]
    conflicts: Mapping[str, list[str]]

    def claims(self) -> dict[str, Claim]:
        """profile -> its claim, for the profiles whose handler is theirs alone."""
        return {
            state.name: Claim(
                handler=handler,
                uid=state.observed.uid,
                generation=state.observed.generation,
                resume=state.resume,
            )
            for state in self.live
            if (handler := state.claimed_handler) is not None and handler not in self.conflicts
        }

    def conflict(self, state: ProfileState) -> str | None:
        """Why the profile's handler is in no plan while another profile claims it too
        (None: it is the only one)."""
        handler = state.claimed_handler
        if handler is None or handler not in self.conflicts:
            return None
        others = [n for n in self.conflicts[handler] if n != state.name]
        return (
            f"handler {handler!r} is also claimed by {', '.join(others)}; none of them is "
            "in the plan until only one claims it"
        )


@dataclass
class Memo:
    """What earlier passes worked out per profile, kept by the controller from pass to pass,
    so that a pass over hundreds of profiles works out again only those that changed. Never
    more than a shortcut: ``reconcile`` returns the same with it as without it.

    ``parsed``: name -> (what the spec's parse reads, what it parsed to). ``statuses``:
    name -> (everything a status is computed from but the status itself, the status); used
    only while the profile still carries exactly that status, so the pass that computed it
    found nothing to change (a condition's time changes only when it transitions)."""

    parsed: dict[str, tuple[Any, Parsed]] = field(default_factory=dict)
    statuses: dict[str, tuple[Any, dict[str, Any]]] = field(default_factory=dict)
    # name -> (the parsed spec, its plan entry): the entry of the same model object, which
    # ``parsed`` hands out again while the spec is unchanged.
    entries: dict[str, tuple[WindowsRuntimeProfile, PlanEntry]] = field(default_factory=dict)

    def entry(self, state: ProfileState, earlier: Memo) -> PlanEntry:
        """``plan_entry`` of the profile's spec, or the one an earlier pass made of it."""
        assert state.model is not None
        known = earlier.entries.get(state.name)
        entry = known[1] if known is not None and known[0] is state.model else None
        if entry is None:
            entry = plan_entry(state.model)
        self.entries[state.name] = (state.model, entry)
        return entry

    def keep(self, current: Memo) -> None:
        """Become ``current``: this pass's profiles only (deleted ones go)."""
        self.parsed, self.statuses, self.entries = current.parsed, current.statuses, current.entries


def parse_inputs(observed: ObservedProfile, settings: ReconcileSettings) -> Any:
    """All that ``parse`` reads: the document but its status and the metadata that
    ``ObjectMeta`` ignores (resourceVersion changes with every status write)."""
    metadata = observed.metadata
    return (
        settings.require_node_gating,
        settings.allow_evict,
        {k: v for k, v in observed.body.items() if k not in ("status", "metadata")},
        {k: metadata.get(k) for k in ("name", "generation", "uid", "labels", "annotations")},
    )


def parse(observed: ObservedProfile, settings: ReconcileSettings) -> Parsed:
    """The profile's spec as the model reads it, or None and the problems found."""
    try:
        # The status is ours to write; whatever it holds must not make the spec invalid.
        model = parse_profile({k: v for k, v in observed.body.items() if k != "status"})
    except ProfileInvalidError as invalid:
        return None, tuple(str(problem) for problem in invalid.problems)
    if settings.require_node_gating and not model.spec.scheduling.require_ready_label:
        return None, (
            "spec.scheduling.requireReadyLabel: must be true: this cluster's operator runs "
            "with --require-node-gating (got False)",
        )
    if not settings.allow_evict and model.spec.rollout.drain == "Evict":
        return None, (
            "spec.rollout.drain: this cluster's operator may not evict pods (it runs without "
            "--allow-evict, chart value operator.allowEvict, so its token cannot list pods): "
            "use Cordon or None, or ask the cluster's administrator to allow eviction "
            "(got 'Evict')",
        )
    return model, ()


def _parsed(
    observed: ObservedProfile, settings: ReconcileSettings, earlier: Memo, memo: Memo
) -> tuple[Any, Parsed]:
    """``parse``, or what it gave for the same input in an earlier pass."""
    inputs = parse_inputs(observed, settings)
    known = earlier.parsed.get(observed.name)
    parsed = known[1] if known is not None and known[0] == inputs else parse(observed, settings)
    memo.parsed[observed.name] = (inputs, parsed)
    return inputs, parsed


def last_good_entries(plan: Mapping[str, Any] | None) -> dict[str, tuple[str, dict[str, Any]]]:
    """profile name -> (handler, entry) of what the current plan holds for it."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for handler, entry in ((plan or {}).get("handlers") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("profile"), str):
            found[entry["profile"]] = (handler, entry)
    return found


def trusted_last_good(
    found: tuple[str, dict[str, Any]] | None, profile: ObservedProfile
) -> tuple[str, PlanEntry] | None:
    """The plan's entry for an invalid profile, if the operator may write it again: it names
    this profile's uid and is exactly what the renderer makes of the spec it carries. Whoever
    can write the plan ConfigMap could otherwise plant an entry that the operator would keep
    re-emitting for as long as the profile stays invalid. An entry without a spec (written by
    an operator before entries carried one) is kept: agents refuse the plan while it is in
    it, so nodes hold still until the profile is fixed, instead of losing the handler (if
    it has the shape such an operator wrote: the typed entry without its spec)."""
    if found is None:
        return None
    handler, entry = found
    if entry.get("uid") != profile.uid:
        return None
    try:
        if "spec" not in entry:
            return handler, PlanEntry.model_validate(entry)
        return handler, checked_entry(handler, entry)
    except (ValidationError, EntryRefusedError):
        return None


def read_profiles(
    observed: Observed, settings: ReconcileSettings, earlier: Memo, memo: Memo
) -> Profiles:
    """The live profiles of ``observed``, parsed (through ``earlier``; ``memo`` records this
    pass's parses); only an invalid spec falls back to the plan's entry."""
    last_good = last_good_entries(observed.plan)
    live = []
    claims: dict[str, list[str]] = defaultdict(list)
    for profile in observed.profiles:
        if profile.deleting:
            continue
        inputs, (model, problems) = _parsed(profile, settings, earlier, memo)
        kept = (
            None if model is not None else trusted_last_good(last_good.get(profile.name), profile)
        )
        state = ProfileState(profile, inputs, model, problems, kept)
        if state.claimed_handler is not None:
            claims[state.claimed_handler].append(state.name)
        live.append(state)
    conflicts = {h: sorted(names) for h, names in claims.items() if len(names) > 1}
    return Profiles(tuple(live), conflicts)
