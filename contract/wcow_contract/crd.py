"""Generate the WindowsRuntimeProfile CRD from the pydantic model.

Pydantic emits JSON Schema (``$ref``, ``anyOf`` with null, titles, defaults); Kubernetes
wants a structural OpenAPI v3 schema (every node typed, no refs, properties and
additionalProperties never together). This module translates one into the other, so the
model stays the single source of truth and ``crds/`` is never edited by hand.
"""

from __future__ import annotations

import copy
from typing import Any

from wcow_contract import v1alpha1

_DROP = {"title", "default", "$defs", "propertyNames"}

# kube-openapi lets a JSON number with a zero fraction (2.0) through as an integer
# (pkg/validation/validate/type.go, isFloatInt; kube-openapi 589584f, Kubernetes 1.35), and
# then a CEL rule that reads the field fails on it (k8s.io/apiserver v0.35.4
# pkg/cel/common/valuesunstructured.go: "invalid data, expected int"): so 2.0 would be stored
# in one field and refused in the next. This rule on every integer field of the spec refuses
# it everywhere a user writes, as the model does (the status's integers: ``openapi_schema``).
WHOLE_NUMBER_RULE = {
    "rule": "type(self) == int",
    "message": "must be an integer, written without a decimal point",
}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Isolation", "type": "string", "jsonPath": ".spec.isolation"},
    {"name": "Build", "type": "string", "jsonPath": ".spec.windowsBuild"},
    {"name": "Handler", "type": "string", "jsonPath": ".status.handler"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {
        "name": "Ready Nodes",
        "type": "integer",
        "jsonPath": ".status.nodes.ready",
        "description": "Nodes that passed the canary for this handler",
    },
    {
        "name": "Eligible",
        "type": "integer",
        "jsonPath": ".status.nodes.eligible",
        "priority": 1,
    },
    {
        "name": "Not Ready Because",
        "type": "string",
        "jsonPath": ".status.failures[0].reason",
        "description": "The reason of the first node in status.failures, e.g. "
        "GuestBuildUnsupported: sandboxes can start there, but its pause image boots another "
        "guest build, so the class's images would not run",
    },
    {
        "name": "Rollout",
        "type": "string",
        "jsonPath": ".status.rollout.progress",
        "description": "Windows nodes that run the last change of this handler, of all",
    },
    {
        "name": "Rollout State",
        "type": "string",
        "jsonPath": ".status.rollout.state",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _clean_description(text: str) -> str:
    return " ".join(text.split())


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        choices = [c for c in node["anyOf"] if c != {"type": "null"}]
        if len(choices) != 1:
            raise ValueError(f"cannot express a union of {choices!r} in a structural schema")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        inner = _structural(choices[0], defs)
        return {**inner, **_structural(rest, defs)} if rest else inner

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "additionalProperties" and value is False):
            continue  # unknown fields are pruned by the API server already
        out.update(_translate(key, value, defs))
    if "properties" in out or "additionalProperties" in out:
        out.setdefault("type", "object")
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "integer":
        out["x-kubernetes-validations"] = [
            WHOLE_NUMBER_RULE,
            *out.get("x-kubernetes-validations", []),
        ]
    return out


def _translate(key: str, value: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if key == "const":
        return {"enum": [value]}
    if key == "description":
        return {key: _clean_description(value)}
    if key == "properties":
        return {key: {name: _structural(prop, defs) for name, prop in value.items()}}
    if key in ("items", "additionalProperties"):
        return {key: _structural(value, defs)}
    return {key: value}


def _without_rule(node: Any, rule: dict[str, str]) -> Any:
    """``node`` with ``rule`` taken out of every x-kubernetes-validations under it."""
    if isinstance(node, list):
        return [_without_rule(item, rule) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_rule(v, rule) for k, v in node.items() if k != "x-kubernetes-validations"}
    kept = [r for r in node.get("x-kubernetes-validations", []) if r != rule]
    if kept:
        out["x-kubernetes-validations"] = kept
    return out


def openapi_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema for WindowsRuntimeProfile."""
    raw = v1alpha1.WindowsRuntimeProfile.model_json_schema(by_alias=True, mode="validation")
    schema = _structural(raw, raw.get("$defs", {}))
    # The status is the operator's to write (the chart's RBAC grants update of
    # windowsruntimeprofiles/status to it and to no other role; a cluster admin can write
    # anything anyway), from Python ints, and no rule reads it (tests/unit/test_crd.py), so the
    # whole-number rule guards nothing there. It would cost every status write: kube-apiserver
    # evaluates all of a CRD's rules over the whole object on each write of the status
    # subresource; ratcheting only drops the errors of unchanged fields
    # (k8s.io/apiextensions-apiserver v0.35.4 pkg/registry/customresource/status_strategy.go
    # ValidateUpdate, pkg/apiserver/schema/cel/validation.go). Measured: 8-9% of
    # kube-apiserver's CPU per status write (benchmarks/status_rules.py; README, "converge").
    schema["properties"]["status"] = _without_rule(
        schema["properties"]["status"], WHOLE_NUMBER_RULE
    )
    # metadata is the API server's: declare only its type, as controller-gen does.
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["required"] = ["spec"]
    schema["description"] = _clean_description(
        "A Windows container runtime (process or Hyper-V isolation) that wcow-runtime "
        "turns into a RuntimeClass and a containerd runhcs handler on every Windows node "
        "that can run it."
    )
    return schema


def custom_resource_definition() -> dict[str, Any]:
    """The complete apiextensions.k8s.io/v1 CustomResourceDefinition."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "wcow-runtime"},
        },
        "spec": {
            "group": v1alpha1.GROUP,
            "scope": "Cluster",
            "names": {
                "kind": v1alpha1.KIND,
                "listKind": f"{v1alpha1.KIND}List",
                "plural": v1alpha1.PLURAL,
                "singular": v1alpha1.SINGULAR,
                "shortNames": list(v1alpha1.SHORT_NAMES),
                "categories": ["wcow"],
            },
            "versions": [
                {
                    "name": v1alpha1.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
