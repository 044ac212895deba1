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
          "spec": { ...the profile's spec as the node needs it (``NODE_SPEC_FIELDS``)... }
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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from wcow_contract.canonical import canonical_json, dump_json
from wcow_contract.runtime_table import RUNTIMES_PATH, runtime_table
from wcow_contract.v1alpha1 import API_VERSION
from wcow_contract.v1alpha1 import WindowsRuntimeProfile as Profile

PLAN_KIND = "RuntimePlan"
PLAN_SCHEMA_VERSION = 1
PLAN_CONFIGMAP = "wcow-runtime-plan"
PLAN_KEY = "plan.json"
PLAN_HASH_ANNOTATION = "runtime.wcow.dev/plan-hash"


# The parts of a profile's spec that decide what a node does. The rest (overhead, scheduling,
# rollout) is the operator's business and stays out, so changing it does not change the plan.
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
    left out, so the entry stays small)."""
    return profile.spec.model_dump(
        by_alias=True, mode="json", exclude_defaults=True, include=set(NODE_SPEC_FIELDS)
    )


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


def plan_entry(profile: Profile) -> dict[str, Any]:
    spec = profile.spec
    vm = spec.effective_vm()
    options = runtime_table(profile)
    vm_entry = None
    if vm is not None:
        vm_entry = {
            "processorCount": options["options"]["VmProcessorCount"],
            "memoryMB": options["options"]["VmMemorySizeInMb"],
            "fullyPhysicallyBacked": vm.fully_physically_backed,
        }
    return {
        "profile": profile.name,
        "generation": profile.metadata.generation,
        "uid": profile.metadata.uid,
        "isolation": spec.isolation,
        "windowsBuild": spec.guest_build.label_value if spec.guest_build else None,
        "vm": vm_entry,
        "canary": spec.canary.model_dump(by_alias=True),
        "runtime": options,
        "spec": node_spec(profile),
    }


def plan_hash(body: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


def build_plan(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The plan for these handler entries (handler -> ``plan_entry``), with its hash."""
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": PLAN_KIND,
        "schemaVersion": PLAN_SCHEMA_VERSION,
        "runtimesPath": {str(v): list(path) for v, path in RUNTIMES_PATH.items()},
        "handlers": {handler: dict(entries[handler]) for handler in sorted(entries)},
    }
    return {**body, "hash": plan_hash(body)}


def plan_for(profiles: Iterable[Profile]) -> dict[str, Any]:
    """The plan for profiles whose handlers are unique (the caller checks that)."""
    return build_plan({profile.handler: plan_entry(profile) for profile in profiles})


def dump_plan(plan: Mapping[str, Any]) -> str:
    return dump_json(plan)
