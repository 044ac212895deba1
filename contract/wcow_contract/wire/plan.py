"""The plan: what every node agent should configure, as one versioned JSON document.

Shape (schemaVersion 1)::

    {
      "apiVersion": "runtime.wcow.dev/v1alpha1",
      "kind": "RuntimePlan",
      "schemaVersion": 1,
      "runtimesPath": {"2": [...], "3": [...], "4": [...]},   # where runtimes live per
                                                              # config.toml version
      "handlers": {
        "<handler>": {
          "profile": "<name>", "generation": 3, "uid": "...",
          "isolation": "HyperV", "windowsBuild": "10.0.20348",
          "vm": {"processorCount": 2, "memoryMB": 2048, "fullyPhysicallyBacked": false},
          "canary": {"enabled": true, "timeoutSeconds": 180, "image": null},
          "runtime": { ...the runtimes.<handler> table as data... },
          "nodeSelector": {"pool": "b"},   # only when the profile sets one
          "spec": { ...the profile's spec as the node needs it (``node_spec``)... }
        }
      },
      "hash": "sha256:<hex>"    # over the canonical JSON of everything above
    }

The handler table is the same for every config version (runtime_type, annotation lists and
runhcs options have the same keys in containerd 1.x and 2.x), so it is stored once, with the
table path per version beside it; ``render_containerd_toml`` turns it into TOML.

``spec`` is what the rest of the entry is rendered from. A node agent validates it with the
profile model, renders the entry again and accepts the entry only if it is exactly that: a
plan can carry only what the operator renders from a valid profile, whoever wrote it (the
hash proves integrity, not authorship). ``spec`` was added within schemaVersion 1: agents
that predate it ignore it, agents that check it refuse entries without it.

Schema skew (docs/architecture.md): an agent accepts exactly what its own version renders,
so a field it does not know refuses the plan; entries leave the spec's defaults out, so a
new optional profile field changes the plan only once a profile sets it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from wcow_contract.v1alpha1 import API_VERSION
from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile
from wcow_contract.wire.canonical import canonical_json, canonical_object, dump_json
from wcow_contract.wire.runtime_table import RUNTIMES_PATH, runtime_table

PLAN_KIND: Final = "RuntimePlan"
PLAN_SCHEMA_VERSION: Final = 1
PLAN_CONFIGMAP = "wcow-runtime-plan"
PLAN_KEY = "plan.json"
PLAN_HASH_ANNOTATION = "runtime.wcow.dev/plan-hash"


# The parts of a profile's spec that decide what a node does. The rest (overhead, rollout,
# scheduling but its nodeSelector) is the operator's business and stays out, so changing it
# does not change the plan. ``spec.scheduling.nodeSelector`` decides where the handler is
# applied at all (``node_spec``).
NODE_SPEC_FIELDS = frozenset(
    {
        "isolation",
        "windows_build",
        "handler",
        "sandbox",
        "vm",
        "annotations",
        "containerd",
        "canary",
    }
)


def node_spec(profile: Profile) -> dict[str, Any]:
    """The spec fields a node needs, as the profile document would carry them (defaults
    left out, so the entry stays small), and the profile's own nodeSelector when it has one
    (a node its labels leave out does not apply the handler)."""
    spec = profile.spec.model_dump(
        by_alias=True, mode="json", exclude_defaults=True, include=set(NODE_SPEC_FIELDS)
    )
    selector = profile.spec.scheduling.node_selector
    if selector:
        spec["scheduling"] = {"nodeSelector": dict(sorted(selector.items()))}
    return spec


def entry_document(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The profile document a plan entry says it was rendered from (``plan_entry`` reversed)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "WindowsRuntimeProfile",
        "metadata": {
            "name": entry.get("profile"),
            "generation": entry.get("generation"),
            "uid": entry.get("uid"),
        },
        "spec": entry.get("spec"),
    }


class _Wire(BaseModel):
    """A part of the plan as it travels: strict (no coercion, so a value dumps back exactly as
    it came), frozen, and closed (a key this version does not know is an error)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )

    def view(self) -> dict[str, Any]:
        """This part as JSON data that shares the model's dicts and lists: to read or to
        serialize, never to change (a plan's parts stay as they were rendered)."""
        return {
            key: value.view() if isinstance(value, _Wire) else value
            for name, key, omitted in _view_fields(type(self))
            if (value := getattr(self, name)) is not None or not omitted
        }

    def document(self) -> dict[str, Any]:
        """This part as JSON data of its own: the caller may change it."""
        return copy.deepcopy(self.view())

    @staticmethod
    def _omitted_when_none(name: str) -> bool:
        return False


@functools.cache
def _view_fields(wire: type[_Wire]) -> tuple[tuple[str, str, bool], ...]:
    """(attribute, JSON key, omitted when None) of each field of a plan part, worked out
    once per class: a pass views every entry of a plan of hundreds."""
    return tuple(
        (name, field.alias or name, wire._omitted_when_none(name))
        for name, field in wire.model_fields.items()
    )


class PlanVm(_Wire):
    """The utility VM a Hyper-V handler asks for (what its canary checks)."""

    processor_count: int
    memory_mb: int = Field(alias="memoryMB")
    fully_physically_backed: bool


class PlanCanary(_Wire):
    """The profile's ``spec.canary``, as the agent runs it."""

    enabled: bool
    timeout_seconds: int
    image: str | None


class PlanEntry(_Wire):
    """What the plan says of one handler."""

    profile: str
    generation: int | None
    uid: str | None
    isolation: Literal["Process", "HyperV"]
    windows_build: str | None
    """The guest build, ``10.0.<build>``; None: a process handler that pins no build."""
    vm: PlanVm | None
    canary: PlanCanary
    runtime: dict[str, Any]
    """The ``runtimes.<handler>`` table of config.toml, as data (``runtime_table``)."""
    spec: dict[str, Any] | None = None
    """The profile spec the entry was rendered from (``node_spec``). None only in an entry an
    operator wrote before entries carried it: the key is then absent, and agents refuse it."""
    node_selector: dict[str, str] | None = None
    """The profile's ``spec.scheduling.nodeSelector``: only a node whose labels match every
    pair applies the handler (the key is absent when the profile sets none, so such entries
    keep their bytes)."""

    @staticmethod
    def _omitted_when_none(name: str) -> bool:
        return name in ("spec", "node_selector")

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with these labels is one the profile's nodeSelector lets in."""
        return all(labels.get(key) == value for key, value in (self.node_selector or {}).items())


class Plan(_Wire):
    """The plan: every handler's entry, and the hash over the canonical JSON of the rest."""

    api_version: Literal["runtime.wcow.dev/v1alpha1"]
    kind: Literal["RuntimePlan"]
    schema_version: Literal[1]
    runtimes_path: dict[str, list[str]]
    """Where handler tables live, by config.toml schema version (``RUNTIMES_PATH``)."""
    handlers: dict[str, PlanEntry]
    hash: str
    """``sha256:<hex>`` over the canonical JSON of the document without ``hash``."""

    def view(self) -> dict[str, Any]:
        body = plan_body({h: entry.view() for h, entry in self.handlers.items()})
        return {**body, "hash": self.hash}


def plan_entry(profile: Profile) -> PlanEntry:
    spec = profile.spec
    vm = spec.effective_vm()
    options = runtime_table(profile)
    vm_entry = None
    if vm is not None:
        vm_entry = PlanVm(
            processor_count=options["options"]["VmProcessorCount"],
            memory_mb=options["options"]["VmMemorySizeInMb"],
            fully_physically_backed=vm.fully_physically_backed,
        )
    canary = spec.canary
    selector = spec.scheduling.node_selector
    return PlanEntry(
        profile=profile.name,
        generation=profile.metadata.generation,
        uid=profile.metadata.uid,
        isolation=spec.isolation,
        windows_build=spec.guest_build.label_value if spec.guest_build else None,
        vm=vm_entry,
        canary=PlanCanary(
            enabled=canary.enabled, timeout_seconds=canary.timeout_seconds, image=canary.image
        ),
        runtime=options,
        spec=node_spec(profile),
        node_selector=dict(sorted(selector.items())) if selector else None,
    )


def plan_hash(body: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


def plan_body(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The plan's JSON document around these entry documents (handler -> entry), without its
    hash: the one place that lays the plan out."""
    return {
        "apiVersion": API_VERSION,
        "kind": PLAN_KIND,
        "schemaVersion": PLAN_SCHEMA_VERSION,
        "runtimesPath": {str(v): list(path) for v, path in RUNTIMES_PATH.items()},
        "handlers": {handler: entries[handler] for handler in sorted(entries)},
    }


def plan_document(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``plan_body`` with its hash: the JSON of a plan holding these entry documents."""
    body = plan_body(entries)
    return {**body, "hash": plan_hash(body)}


def build_plan(entries: Mapping[str, PlanEntry]) -> Plan:
    """The plan for these handler entries (handler -> ``plan_entry``), with its hash."""
    return plan_with_text(entries)[0]


def plan_with_text(entries: Mapping[str, PlanEntry]) -> tuple[Plan, dict[str, Any], str]:
    """``build_plan``, its ``view()`` (the document it is built from: every entry viewed once)
    and the view's ``canonical_json`` (the ConfigMap's text), the handlers encoded once for
    both the hash and the text."""
    body = plan_body({handler: entry.view() for handler, entry in entries.items()})
    members = {key: canonical_json(value) for key, value in body.items()}
    digest = "sha256:" + hashlib.sha256(canonical_object(members)).hexdigest()
    members["hash"] = canonical_json(digest)
    plan = Plan(
        api_version=body["apiVersion"],
        kind=body["kind"],
        schema_version=body["schemaVersion"],
        runtimes_path=body["runtimesPath"],
        handlers={handler: entries[handler] for handler in sorted(entries)},
        hash=digest,
    )
    return plan, {**body, "hash": digest}, canonical_object(members).decode("utf-8")


def plan_for(profiles: Iterable[Profile]) -> Plan:
    """The plan for profiles whose handlers are unique (the caller checks that)."""
    return build_plan({profile.handler: plan_entry(profile) for profile in profiles})


def dump_plan(plan: Plan) -> str:
    """``plan.json`` as ``wcow render --out`` writes it (agents read any JSON layout)."""
    return dump_json(plan.view())
