"""The pure image decision (webhook.image_decision): facts in, pins / refusal / warnings out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.admission.pods import container, pod, profile, profiles
from wcow_operator.registry.facts import (
    Entry,
    Facts,
    ImageFacts,
    LookupFailure,
    Platform,
    repository_of,
)
from wcow_operator.webhook.decide import admit, admit_update
from wcow_operator.webhook.decision import Admitted, Refused
from wcow_operator.webhook.image_decision import (
    IMAGE_BUILD_MISMATCH,
    IMAGE_UNRESOLVED,
    ORIGINAL_IMAGES,
    changed_images,
    only_containers,
    references,
    with_images,
    with_updated_images,
)

REPO = "registry.example:5000/team/app"
D17763, D20348, D26100 = ("sha256:" + c * 64 for c in "abc")


def windows(digest: str, version: str, arch: str = "amd64") -> Entry:
    return Entry(digest, Platform("windows", arch, version))


INDEX = ImageFacts(
    REPO,
    "sha256:" + "f" * 64,
    True,
    (
        windows(D17763, "10.0.17763.1234"),
        windows(D20348, "10.0.20348.2655"),
        windows(D26100, "10.0.26100.1742"),
    ),
)
ONLY_2022 = ImageFacts(REPO, "sha256:" + "e" * 64, True, (windows(D20348, "10.0.20348.2655"),))


def decide(
    build: str, isolation: str, facts: dict[str, Facts], refuse: bool = False, **extra: Any
) -> tuple[Any, tuple[str, ...]]:
    item = profile("wc", isolation=isolation, windowsBuild=build, **extra)
    images = [container("init")]
    images[0]["image"] = f"{REPO}:multi"
    body = pod("wc", containers=[dict(container(), image=f"{REPO}:multi")], init=images)
    sized = admit(body, profiles(item))
    return with_images(sized, item, facts, refuse)


def test_a_hyperv_pod_of_an_older_guest_is_pinned_to_that_build_init_containers_too() -> None:
    decision, unchecked = decide("ltsc2019", "HyperV", {f"{REPO}:multi": INDEX})
    assert isinstance(decision, Admitted)
    assert unchecked == ()
    spec = decision.pod["spec"]
    assert spec["containers"][0]["image"] == f"{REPO}@{D17763}"
    assert spec["initContainers"][0]["image"] == f"{REPO}@{D17763}"
    original = json.loads(decision.pod["metadata"]["annotations"][ORIGINAL_IMAGES])
    assert original == {"app": f"{REPO}:multi", "init": f"{REPO}:multi"}
    assert any("image=" in change for change in decision.changes)


def test_ws2025_guests_take_the_highest_build_they_can_run() -> None:
    decision, _ = decide("ltsc2025", "HyperV", {f"{REPO}:multi": INDEX})
    assert isinstance(decision, Admitted)
    assert decision.pod["spec"]["containers"][0]["image"] == f"{REPO}@{D26100}"


def test_process_isolated_pods_keep_their_references() -> None:
    decision, _ = decide("ltsc2022", "Process", {f"{REPO}:multi": INDEX})
    assert isinstance(decision, Admitted)
    assert decision.pod["spec"]["containers"][0]["image"] == f"{REPO}:multi"
    assert ORIGINAL_IMAGES not in (decision.pod["metadata"].get("annotations") or {})


@pytest.mark.parametrize("isolation", ["HyperV", "Process"])
def test_an_image_without_the_build_is_refused_naming_container_image_and_builds(
    isolation: str,
) -> None:
    decision, _ = decide("ltsc2019", isolation, {f"{REPO}:multi": ONLY_2022})
    assert isinstance(decision, Refused)
    assert decision.reason == IMAGE_BUILD_MISMATCH
    message = decision.message
    assert "spec.initContainers[init]" in message  # the first container walked
    assert f"{REPO}:multi" in message
    assert "'10.0.20348.2655'" in message
    assert "10.0.17763 (ltsc2019)" in message


def test_a_pinned_manifest_of_another_build_is_refused() -> None:
    one = ImageFacts(REPO, D26100, False, (windows(D26100, "10.0.26100.1742"),))
    item = profile("wc", windowsBuild="ltsc2022")
    body = pod("wc", containers=[dict(container(), image=f"{REPO}@{D26100}")])
    decision, _ = with_images(admit(body, profiles(item)), item, {f"{REPO}@{D26100}": one}, False)
    assert isinstance(decision, Refused)
    assert "(manifest) has Windows builds '10.0.26100.1742'" in decision.message


def test_a_linux_only_image_is_refused_even_without_a_build() -> None:
    linux = ImageFacts(REPO, D20348, False, (Entry(D20348, Platform("linux", "amd64")),))
    item = profile("wc", isolation="Process", windowsBuild=None)
    body = pod("wc", containers=[dict(container(), image=f"{REPO}:latest")])
    decision, _ = with_images(admit(body, profiles(item)), item, {f"{REPO}:latest": linux}, False)
    assert isinstance(decision, Refused)
    assert "no windows/amd64 entry (also 'linux'/'amd64')" in decision.message


def test_an_already_pinned_image_is_left_as_it_is() -> None:
    one = ImageFacts(REPO, D17763, False, (windows(D17763, "10.0.17763.1"),))
    item = profile("wc", windowsBuild="ltsc2019")
    body = pod("wc", containers=[dict(container(), image=f"{REPO}@{D17763}")])
    decision, _ = with_images(admit(body, profiles(item)), item, {f"{REPO}@{D17763}": one}, False)
    assert isinstance(decision, Admitted)
    assert not decision.mutated


def test_an_unreadable_image_is_a_warning_or_with_refuse_a_refusal() -> None:
    failure = LookupFailure("Unreachable", "registry 'x' cannot be reached: refused")
    decision, unchecked = decide("ltsc2019", "HyperV", {f"{REPO}:multi": failure})
    assert isinstance(decision, Admitted)
    assert unchecked == ("Unreachable", "Unreachable")
    assert len(decision.warnings) == 2
    assert "was not checked (registry 'x' cannot be reached" in decision.warnings[0].message
    assert decision.warnings[0].reason == "ImageUnchecked"
    assert decision.pod["spec"]["containers"][0]["image"] == f"{REPO}:multi"

    refused, _ = decide("ltsc2019", "HyperV", {f"{REPO}:multi": failure}, refuse=True)
    assert isinstance(refused, Refused)
    assert refused.reason == IMAGE_UNRESOLVED
    by_profile, _ = decide(
        "ltsc2019", "HyperV", {f"{REPO}:multi": failure}, images={"unreachableRegistry": "Refuse"}
    )
    assert isinstance(by_profile, Admitted)  # with_images takes the policy as given


def test_entries_without_platform_are_not_guessed() -> None:
    blind = ImageFacts(REPO, D17763, True, (Entry(D17763, None),))
    decision, unchecked = decide("ltsc2019", "HyperV", {f"{REPO}:multi": blind})
    assert isinstance(decision, Admitted)
    assert unchecked == ("Malformed", "Malformed")
    assert "without a platform" in decision.warnings[0].message


def test_a_sizing_refusal_stands_and_other_classes_pass() -> None:
    item = profile("wc", windowsBuild="ltsc2019")
    other = pod("other")
    decision, _ = with_images(admit(other, profiles(item)), None, {}, True)
    assert isinstance(decision, Admitted)
    assert decision.pod == other
    host = pod("wc", securityContext={"windowsOptions": {"hostProcess": True}})
    sized = admit(host, profiles(item))
    refused, _ = with_images(
        sized, item, {"mcr.microsoft.com/windows/nanoserver:ltsc2022": INDEX}, False
    )
    assert isinstance(refused, Refused)
    assert refused.reason == "HostProcessWithHyperV"


def test_references_and_repositories() -> None:
    body = pod(
        "wc", containers=[dict(container(), image="a/b:1"), dict(container("c"), image="a/b:1")]
    )
    assert references(body) == ["a/b:1"]
    assert repository_of("host:5000/a/b:tag@sha256:" + "0" * 64) == "host:5000/a/b"
    assert repository_of("host:5000/a/b") == "host:5000/a/b"
    assert repository_of("nanoserver:ltsc2022") == "nanoserver"


def test_an_update_that_changes_an_image_is_judged_and_must_be_pinned_for_hyperv() -> None:

    item = profile("wc", windowsBuild="ltsc2019")
    old = pod("wc", containers=[dict(container(), image=f"{REPO}@{D17763}"), container("side")])
    facts: dict[str, Facts] = {
        f"{REPO}:multi": INDEX,
        f"{REPO}@{D17763}": ImageFacts(REPO, D17763, False, (windows(D17763, "10.0.17763.1"),)),
        f"{REPO}:2022": ONLY_2022,
    }

    def judged(image: str) -> Any:
        new = pod("wc", containers=[dict(container(), image=image), container("side")])
        names = changed_images(old, new)
        decision = admit_update(old, new, profiles(item))
        return names, with_updated_images(
            decision, item, only_containers(new, names), facts, False
        )[0]

    names, unpinned = judged(f"{REPO}:multi")
    assert names == ["app"]
    assert isinstance(unpinned, Refused)
    assert unpinned.reason == IMAGE_BUILD_MISMATCH
    assert f"write the guest build's manifest (app: '{REPO}@{D17763}')" in unpinned.message
    _, mismatch = judged(f"{REPO}:2022")
    assert isinstance(mismatch, Refused)
    assert "has Windows builds '10.0.20348.2655'" in mismatch.message
    names, pinned = judged(f"{REPO}@{D17763}")
    assert names == []
    assert isinstance(pinned, Admitted)


def test_a_nested_original_images_annotation_is_no_crash() -> None:
    """A tenant's own runtime.wcow.dev/original-images, nested 100,000 deep: ignored (the
    webhook writes its own), never an exception."""
    item = profile("wc", isolation="HyperV", windowsBuild="ltsc2019")
    body = pod("wc", containers=[dict(container(), image=f"{REPO}:multi")])
    body["metadata"]["annotations"] = {ORIGINAL_IMAGES: "[" * 100_000 + "]" * 100_000}
    decision, _ = with_images(admit(body, profiles(item)), item, {f"{REPO}:multi": INDEX}, False)
    assert isinstance(decision, Admitted)
    original = json.loads(decision.pod["metadata"]["annotations"][ORIGINAL_IMAGES])
    assert original == {"app": f"{REPO}:multi"}
