"""Spec.vm.sizing, maxProcessorCount, maxMemoryMB: the model, the CRD's CEL
rules (judged by cel-python, as the API server would) and the rendered allow-list."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import profile_document
from tests.unit.test_crd import cel_accepts, pydantic_accepts
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import SIZING_ANNOTATIONS, VM_ANNOTATIONS
from wcow_contract.wire.runtime_table import runtime_table

FROM_LIMITS = {"sizing": "FromPodLimits", "maxProcessorCount": 8, "maxMemoryMB": 8192}

VALID = [
    profile_document(vm=FROM_LIMITS),
    profile_document(vm={**FROM_LIMITS, "processorCount": 8, "memoryMB": 8192}),
    profile_document(vm={"maxProcessorCount": 4}),  # Fixed: optional bounds
    profile_document(vm={"sizing": "Fixed"}),
]
INVALID = [
    (profile_document(vm={"sizing": "FromPodLimits"}), "maxProcessorCount"),
    (profile_document(vm={"sizing": "FromPodLimits", "maxProcessorCount": 4}), "maxMemoryMB"),
    (profile_document(vm={**FROM_LIMITS, "maxMemoryMB": 4097}), "odd"),
    (profile_document(vm={"maxProcessorCount": 1}), "below processorCount 2"),
    (profile_document(vm={"processorCount": 6, "maxProcessorCount": 4}), "below processorCount 6"),
    (profile_document(vm={"maxMemoryMB": 512}), "below memoryMB 1024"),
    (profile_document(vm={"memoryMB": 4096, "maxMemoryMB": 2048}), "below memoryMB 4096"),
    (profile_document(vm={"sizing": "Elastic"}), "sizing"),
]


@pytest.mark.parametrize("document", VALID, ids=str)
def test_valid_sizing_is_accepted_by_model_and_cel(document: dict[str, Any]) -> None:
    assert pydantic_accepts(document)
    assert cel_accepts(document)


@pytest.mark.parametrize(("document", "words"), INVALID, ids=str)
def test_invalid_sizing_is_refused_by_model_and_cel(document: dict[str, Any], words: str) -> None:
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(document)
    assert words in str(caught.value)
    if document["spec"]["vm"].get("sizing") != "Elastic":  # the enum is the schema's, not CEL's
        assert not cel_accepts(document), "the API server would store what the model refuses"


def test_fixed_is_the_default() -> None:
    vm = parse_profile(profile_document(vm={})).spec.effective_vm()
    assert vm is not None
    assert vm.sizing == "Fixed"


@pytest.mark.parametrize("pod", [None, [], ["io.microsoft.virtualmachine.storageqos.*"]])
def test_from_pod_limits_always_lets_the_sizing_annotations_through(pod: list[str] | None) -> None:
    annotations = {} if pod is None else {"annotations": {"pod": pod}}
    profile = parse_profile(profile_document(vm=FROM_LIMITS, **annotations))
    allowed = runtime_table(profile)["pod_annotations"]
    assert [key for key in SIZING_ANNOTATIONS if key in allowed] == list(SIZING_ANNOTATIONS)
    assert allowed[: len(pod or [])] == (pod or [VM_ANNOTATIONS])[: len(pod or [])]


def test_fixed_keeps_the_allow_list_as_written() -> None:
    fixed = parse_profile(profile_document(vm={"maxProcessorCount": 4}, annotations={"pod": []}))
    assert "pod_annotations" not in runtime_table(fixed)
    default = parse_profile(profile_document(vm={}))
    assert runtime_table(default)["pod_annotations"] == [VM_ANNOTATIONS]
