"""The CRD in crds/ is generated from the model, structural, and its CEL rules agree with it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, SAMPLES, profile_document
from wcow_contract.catalog.annotation_patterns import pattern_problem
from wcow_contract.crd import WHOLE_NUMBER_RULE, custom_resource_definition, openapi_schema
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_operator.cli import crd_yaml

CRD_FILE = ROOT / "crds" / "runtime.wcow.dev_windowsruntimeprofiles.yaml"


def test_checked_in_crd_matches_the_model() -> None:
    assert CRD_FILE.read_text(encoding="utf-8") == crd_yaml(), (
        "crds/ is stale: run `make crds` and commit the result"
    )


def test_crd_validates_against_the_kubernetes_schema() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)


def test_crd_names_scope_and_subresources() -> None:
    spec = custom_resource_definition()["spec"]
    assert spec["group"] == "runtime.wcow.dev"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["plural"] == "windowsruntimeprofiles"
    assert spec["names"]["shortNames"] == ["wrp"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Isolation"] == ".spec.isolation"
    assert columns["Build"] == ".spec.windowsBuild"
    assert columns["Handler"] == ".status.handler"
    assert columns["Ready Nodes"] == ".status.nodes.ready"
    assert columns["Age"] == ".metadata.creationTimestamp"


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")


def test_schema_is_structural() -> None:
    """Every node typed (or int-or-string / preserve-unknown), no refs or unions left,
    properties and additionalProperties never together (apiextensions structural rules)."""
    for path, node in _nodes(openapi_schema()):
        assert "$ref" not in node, path
        assert "properties" not in node or "additionalProperties" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, path
        assert "oneOf" not in node, path
        assert "type" in node, f"{path or '<root>'} has no type"


def test_every_spec_field_is_described_for_kubectl_explain() -> None:
    spec = openapi_schema()["properties"]["spec"]
    for path, node in _nodes(spec, "spec"):
        if path.endswith(("[*]", "[]")):
            continue
        assert node.get("description"), f"{path} has no description"


# ---- CEL rules: evaluated with cel-python on the same documents pydantic judges ----


def _rules(
    schema: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str]]:
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule["rule"]
    for name, child in schema.get("properties", {}).items():
        yield from _rules(child, (*path, name))
    if "items" in schema:
        yield from _rules(schema["items"], (*path, "[]"))


def _targets(document: Any, path: tuple[str, ...]) -> Iterator[Any]:
    if not path:
        yield document
        return
    head, rest = path[0], path[1:]
    if head == "[]":
        for item in document if isinstance(document, list) else []:
            yield from _targets(item, rest)
    elif isinstance(document, dict) and head in document:
        yield from _targets(document[head], rest)


def cel_accepts(document: dict[str, Any]) -> bool:
    environment = celpy.Environment()
    for path, rule in _rules(openapi_schema()):
        program = environment.program(environment.compile(rule))
        for target in _targets(document, path):
            result = program.evaluate({"self": celpy.json_to_cel(target)})
            if not bool(result):
                return False
    return True


def pydantic_accepts(document: dict[str, Any]) -> bool:
    try:
        parse_profile(document)
    except ProfileInvalidError:
        return False
    return True


def _samples() -> list[dict[str, Any]]:
    return [
        document
        for path in sorted(Path(SAMPLES).glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    ]


CROSS_FIELD_INVALID = [
    profile_document(isolation="Process", vm={"processorCount": 2}),
    profile_document(windowsBuild=None),
    profile_document(vm={"memoryMB": 2047}),
    profile_document(overhead={"podFixed": {"cpu": "1"}, "policy": "Baseline"}),
    profile_document(isolation="Process", overhead={"policy": "WholeVM"}),
    profile_document(
        scheduling={"tolerations": [{"key": "os", "operator": "Exists", "value": "x"}]}
    ),
    profile_document(
        scheduling={"tolerations": [{"key": "os", "effect": "NoSchedule", "tolerationSeconds": 1}]}
    ),
    profile_document(name="has.dots"),
    # promises Windows does not keep are refused by the server too
    profile_document(sandbox={"image": "mcr.microsoft.com/oss/kubernetes/pause:3.9"}),
    profile_document(sandbox={"platform": "windows/arm64"}),
    profile_document(annotations={"pod": ["containerd.io/snapshot/*"]}),
    profile_document(annotations={"container": ["io.microsoft.container.*", "a/b/c*"]}),
    # every rule of the model has its twin on the server
    profile_document(annotations={"pod": ["io.microsoft.virtual machine.*"]}),
    profile_document(annotations={"pod": ["-io.microsoft.*"]}),
    profile_document(annotations={"pod": [f"{'a' * 64}*"]}),
    profile_document(scheduling={"nodeSelector": {"bad key": "x"}}),
    profile_document(scheduling={"nodeSelector": {f"{'a' * 254}/b": "x"}}),
    profile_document(scheduling={"nodeSelector": {"runtime.wcow.dev/hv": "ready"}}),
    profile_document(scheduling={"nodeSelector": {"kubernetes.io/os": "linux"}}),
    profile_document(scheduling={"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    profile_document(scheduling={"tolerations": [{"effect": "NoSchedule"}]}),
    profile_document(
        isolation="Process",
        scheduling={
            "requireReadyLabel": False,
            "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.17763"},
        },
    ),
    profile_document(
        vm={"fullyPhysicallyBacked": True},
        containerd={
            "options": {
                "DefaultContainerAnnotations": {
                    "io.microsoft.virtualmachine.fullyphysicallybacked": "false"
                }
            }
        },
    ),
    profile_document(overhead={"podFixed": {"cpu": -1}}),
]

# Accepted by both, though a rule once stumbled on them: fields left out or null.
EDGES_VALID = [
    profile_document(sandbox={}),
    profile_document(overhead={"podFixed": {"cpu": 2, "memory": 2**63 - 1}}),
    profile_document(scheduling={"nodeSelector": {f"{'a' * 253}/{'b' * 63}": "x"}}),
    profile_document(
        isolation="Process",
        windowsBuild="20h2",
        scheduling={
            "requireReadyLabel": False,
            "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.19042"},
        },
    ),
    profile_document(annotations={"pod": ["[a-z]*", "a\\b", "*.io/?x*"]}),
]


def _without_nulls(document: dict[str, Any]) -> dict[str, Any]:
    clean = copy.deepcopy(document)
    clean["spec"] = {k: v for k, v in clean["spec"].items() if v is not None}
    return clean


@pytest.mark.parametrize("document", _samples(), ids=lambda d: d["metadata"]["name"])
def test_cel_rules_accept_every_sample(document: dict[str, Any]) -> None:
    assert pydantic_accepts(document)
    assert cel_accepts(document)


@pytest.mark.parametrize("document", CROSS_FIELD_INVALID, ids=str)
def test_cel_rules_refuse_what_the_model_refuses_across_fields(document: dict[str, Any]) -> None:
    document = _without_nulls(document)
    assert not pydantic_accepts(document)
    assert not cel_accepts(document), "the API server would store what the operator rejects"


@pytest.mark.parametrize("document", EDGES_VALID, ids=str)
def test_cel_rules_accept_what_the_model_accepts_at_the_edges(document: dict[str, Any]) -> None:
    document = _without_nulls(document)
    assert pydantic_accepts(document)
    assert cel_accepts(document)


def test_every_integer_field_of_the_spec_refuses_a_number_with_a_decimal_point() -> None:
    """Kube-openapi takes 2.0 for an integer; the rule on each integer field a user writes
    refuses it, as the model does (a field without the rule would store it, one with another
    rule refuse it). The status's integers, which the operator writes, carry no rule (the API
    server would evaluate it on every status write for nothing) and no rule reads the status,
    so a 2.0 there could not be refused by a rule either."""
    integers = {
        path: node for path, node in _nodes(openapi_schema()) if node.get("type") == "integer"
    }
    assert ".spec.vm.processorCount" in integers
    assert ".status.observedGeneration" in integers
    for path, node in integers.items():
        rules = node.get("x-kubernetes-validations", [])
        if path.startswith(".status."):
            assert WHOLE_NUMBER_RULE not in rules, path
        else:
            assert WHOLE_NUMBER_RULE in rules, path
    for path, node in _nodes(openapi_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            assert not path.startswith(".status"), (path, rule)
            assert "status" not in rule["rule"], (path, rule)
    assert not cel_accepts(profile_document(vm={"processorCount": 2.0}))
    assert not pydantic_accepts(profile_document(vm={"processorCount": 2.0}))


_GLOB_CHARACTERS = st.sampled_from([*"aZ0-._/*?", " ", "é", "!", "^", "]"])


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.one_of(
        st.lists(_GLOB_CHARACTERS, min_size=1, max_size=10).map("".join),
        st.tuples(st.integers(240, 260), st.sampled_from(["", "/"]), st.integers(55, 70)).map(
            lambda n: "a*" * (n[0] // 2) + n[1] + "b?" * (n[2] // 2)
        ),
    )
)
def test_the_server_judges_plain_globs_exactly_as_the_model(pattern: str) -> None:
    """The CEL twin of pattern_problem for globs without '[' or '\\' is exact."""
    assert len(_GLOB_RULES) == 1, "the CRD has no rule for each annotation pattern"
    (rule,) = _GLOB_RULES
    accepted = bool(rule.evaluate({"self": celpy.json_to_cel(pattern)}))
    assert accepted == (pattern_problem(pattern) is None), pattern


def _compiled(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


_POD_PATTERNS = openapi_schema()["properties"]["spec"]["properties"]["annotations"]["properties"][
    "pod"
]
_GLOB_RULES = [
    _compiled(rule["rule"]) for rule in _POD_PATTERNS["items"].get("x-kubernetes-validations", [])
]
