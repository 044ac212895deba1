"""Fields and messages that say only what Windows and containerd will do.

Each test names the upstream fact it holds the model to; the CEL cases also run through
``tests/unit/test_crd.py`` (cel-python) and ``tests/e2e/test_crd_server.py`` (a real API
server) via ``HONESTY_INVALID``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import profile_document
from tests.unit.test_crd import cel_accepts
from wcow_contract.catalog.annotation_patterns import pattern_problem
from wcow_contract.catalog.runhcs_options import RUNHCS_OPTIONS, check_option
from wcow_contract.catalog.windows_builds import (
    CLIENT_ONLY_NAMES,
    WINDOWS_SERVER_RELEASES,
    parse_windows_build,
)
from wcow_contract.crd import openapi_schema
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.wire.runtime_table import runtime_table


def problems(**spec: Any) -> list[str]:
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(profile_document(**spec))
    return [str(problem) for problem in caught.value.problems]


def only_problem(**spec: Any) -> str:
    found = problems(**spec)
    assert len(found) == 1, found
    return found[0]


# ---- 1. spec.sandbox.image: no hcsshim reads SandboxImage, no containerd uses it ----


def test_sandbox_image_is_refused_naming_the_field_the_reason_and_the_fix() -> None:
    message = only_problem(sandbox={"image": "mcr.microsoft.com/oss/kubernetes/pause:3.9"})
    assert message.startswith("spec.sandbox.image:")
    assert "SandboxImage" in message  # why: the option nobody reads
    assert "sandbox_image" in message  # what to do on containerd 1.x
    assert "pinned_images.sandbox" in message  # and on 2.x
    assert "pause:3.9" in message


def test_sandbox_image_is_never_rendered_and_not_a_model_field() -> None:
    table = runtime_table(parse_profile(profile_document(sandbox={"platform": "windows/amd64"})))
    assert "SandboxImage" not in table["options"]
    assert "image" not in parse_profile(profile_document()).spec.sandbox.model_fields_set
    assert "image" not in type(parse_profile(profile_document()).spec.sandbox).model_fields


def test_sandbox_image_option_no_longer_points_at_a_field_that_does_not_exist() -> None:
    with pytest.raises(ValueError, match="SandboxImage") as refused:
        check_option("SandboxImage", "pause")
    assert "spec.sandbox.image" not in str(refused.value)
    assert "sandbox_image" in str(refused.value)
    for spec in RUNHCS_OPTIONS.values():
        assert "spec.sandbox.image" not in (spec.refusal or "")


def test_the_crd_refuses_sandbox_image_with_the_same_reason() -> None:
    sandbox = openapi_schema()["properties"]["spec"]["properties"]["sandbox"]
    rules = sandbox["x-kubernetes-validations"]
    assert any("pinned_images.sandbox" in rule["message"] for rule in rules)
    assert not cel_accepts(profile_document(sandbox={"image": "pause:3.9"}))
    assert cel_accepts(profile_document(sandbox={"platform": "windows/amd64"}))


# ---- 3. processorWeight 0 is unset to hcsshim; miscased options; ScrubLogs ----


def test_processor_weight_zero_is_refused_naming_the_field() -> None:
    message = only_problem(vm={"processorWeight": 0})
    assert message.startswith("spec.vm.processorWeight:")
    assert parse_profile(profile_document(vm={"processorWeight": 1})).spec.vm is not None


@pytest.mark.parametrize(
    ("key", "canonical", "decoded_by"),
    [
        ("scrublogs", "ScrubLogs", "containerd 1.x and 2.x"),
        ("defaultContainerAnnotations", "DefaultContainerAnnotations", "containerd 1.x and 2.x"),
        ("ncproxyaddr", "NCProxyAddr", "containerd 1.x and 2.x"),
        ("SCRUBLOGS", "ScrubLogs", "containerd 2.x"),
        ("nCProxyAddr", "NCProxyAddr", "containerd 1.x and 2.x"),
        ("NcProxyAddr", "NCProxyAddr", "containerd 2.x"),
    ],
)
def test_miscased_option_is_refused_with_the_true_reason(
    key: str, canonical: str, decoded_by: str
) -> None:
    with pytest.raises(ValueError, match=key) as refused:
        check_option(key, "x")
    message = str(refused.value)
    assert "silently ignore" not in message  # containerd does decode these
    assert f"{decoded_by} decode" in message
    assert repr(canonical) in message
    if decoded_by == "containerd 2.x":
        assert "1.x drops it" in message


@pytest.mark.parametrize("key", ["scrub_logs", "NoSuchOption"])
def test_unknown_or_snake_case_options_are_still_refused_as_ignored(key: str) -> None:
    with pytest.raises(ValueError, match="silently ignore"):
        check_option(key, True)


def test_scrub_logs_says_what_unset_true_and_false_do() -> None:
    description = openapi_schema()["properties"]["spec"]["properties"]["containerd"]["properties"][
        "options"
    ]["description"]
    assert "ScrubLogs" in description
    assert "v0.15.0-rc.2" in description  # unset = on from there, off before
    table = runtime_table(parse_profile(profile_document()))
    assert "ScrubLogs" not in table["options"]  # unset stays unset: the shim decides
    for value in (True, False):
        options = runtime_table(
            parse_profile(profile_document(containerd={"options": {"ScrubLogs": value}}))
        )["options"]
        assert options["ScrubLogs"] is value


# ---- 4. annotation allow-lists Kubernetes can carry, in Go path.Match syntax ----


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("containerd.io/snapshot/*", "more than one '/'"),
        ("io.microsoft.[", "not a valid glob"),
        ("io.microsoft.\\", "not a valid glob"),
        ("io.microsoft.[]a]", "not a valid glob"),
        ("io.microsoft.[a-]", "not a valid glob"),
        ("io_microsoft/*", "prefix"),
        ("-io.microsoft/*", "prefix"),
        ("io..microsoft/*", "prefix"),
        ("io.microsoft/", "name"),
        ("io.microsoft/-x", "name"),
        ("io.microsoft/a b", "name"),
        ("io.microsoft.virtualmachine.*.", "name"),
        ("x" * 64, "name"),
        ("io.microsoft/[_]x", "name"),
    ],
)
def test_annotation_patterns_kubernetes_cannot_carry_are_refused(pattern: str, why: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None
    assert why in problem
    for field in ("pod", "container"):
        message = only_problem(annotations={field: ["io.microsoft.container.*", pattern]})
        assert message.startswith(f"spec.annotations.{field}[1]:"), message
        assert repr(pattern) in message


@pytest.mark.parametrize(
    "pattern",
    [
        "io.microsoft.virtualmachine.*",
        "io.microsoft.container.*",
        "*",
        "microsoft.com/hostprocess-container",
        "io.microsoft.*/*",
        "example.com/[a-z]*",
        "example.com/[^\\-]?",
        "a?c",
        "io.microsoft.container.processor.\\count",
        "*.example.com/*",
        "k8s.io/*-[0-9]",
        "IO.Microsoft/*",  # annotation keys are checked lowercased (objectmeta.go)
    ],
)
def test_annotation_patterns_that_can_match_a_key_are_accepted(pattern: str) -> None:
    assert pattern_problem(pattern) is None
    parse_profile(profile_document(annotations={"pod": [pattern], "container": [pattern]}))


def test_the_crd_refuses_patterns_with_two_slashes() -> None:
    assert not cel_accepts(profile_document(annotations={"pod": ["containerd.io/snapshot/*"]}))
    assert not cel_accepts(profile_document(annotations={"container": ["a/b/c"]}))
    assert cel_accepts(profile_document(annotations={"pod": ["example.com/*"]}))


# ---- 7. arm64: the agent runs on amd64 nodes only, so arm64 handlers never get ready ----


def test_arm64_sandbox_is_refused_naming_field_value_and_reason() -> None:
    message = only_problem(sandbox={"platform": "windows/arm64"})
    assert message.startswith("spec.sandbox.platform:")
    assert "windows/arm64" in message
    assert "amd64" in message
    assert "agent" in message
    assert not cel_accepts(profile_document(sandbox={"platform": "windows/arm64"}))


# ---- 8. Windows release names people type ----


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("21H2", 20348),
        ("21h2", 20348),
        ("24H2", 26100),
        ("1607", 14393),
        ("1709", 16299),
        ("1803", 17134),
        ("ltsc2022", 20348),
        ("23H2", 25398),
    ],
)
def test_windows_server_release_names_are_accepted(name: str, build: int) -> None:
    assert parse_windows_build(name).number == build
    profile = parse_profile(profile_document(windowsBuild=name))
    assert profile.spec.guest_build is not None
    assert profile.spec.guest_build.number == build


@pytest.mark.parametrize("name", ["22H2", "21H1", "1703"])
def test_client_only_release_names_are_refused_with_the_reason_and_the_list(name: str) -> None:
    message = only_problem(windowsBuild=name)
    assert message.startswith("spec.windowsBuild:")
    assert "not a Windows Server" in message
    assert "21H2" in message  # the accepted names are listed
    assert "pattern" not in message  # not pydantic's raw regex message


def test_one_catalog_lists_every_name_and_the_docs_follow_it() -> None:
    names = [name for release in WINDOWS_SERVER_RELEASES for name in release.names]
    assert len(names) == len({name.lower() for name in names})
    assert not {name.lower() for name in names} & {name.lower() for name in CLIENT_ONLY_NAMES}
    description = openapi_schema()["properties"]["spec"]["properties"]["windowsBuild"][
        "description"
    ]
    for name in names:
        assert name in description, name
