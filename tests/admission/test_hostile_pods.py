"""A hostile tenant's pods: quantities with huge exponents,
shapes the API server never sends, VM annotations beyond the profile, text meant to flood or
forge log lines. Every one is a refusal with a reason, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.pods import FROM_LIMITS, container, pod, profile, profiles
from tests.conftest import profile_document
from wcow_contract.catalog import hcs_annotations as hcs
from wcow_contract.catalog.hcs_annotations import ANNOTATION_MEMORY_MB as MEM
from wcow_contract.catalog.hcs_annotations import ANNOTATION_PROCESSOR_COUNT as CPU
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.quantity import QuantityError, canonical_quantity, parse_quantity
from wcow_operator.webhook.decide import admit
from wcow_operator.webhook.decision import (
    ANNOTATION_INVALID,
    ANNOTATION_NOT_ALLOWED,
    ANNOTATION_OUT_OF_BOUNDS,
    INVALID_QUANTITY,
    MALFORMED_POD,
    POD_TOO_LARGE,
    Admitted,
    Decision,
    Refused,
)
from wcow_operator.webhook.pod_shape import MAX_ANNOTATIONS, MAX_CONTAINERS

SIZED = profiles(profile("hv", vm=FROM_LIMITS))
FIXED = profiles(profile("hv"))


def refused(decision: Decision, reason: str) -> Refused:
    assert isinstance(decision, Refused), decision
    assert decision.reason == reason, decision
    return decision


def admitted(decision: Decision) -> Admitted:
    assert isinstance(decision, Admitted), decision
    return decision


# -- quantities (point 1) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "value"),
    [("memory", "1e20000000"), ("memory", "1e999999999"), ("cpu", "1e400"),
     ("memory", "1e99999"), ("memory", "9223372036854775808"), ("cpu", "8Ei")],
)  # fmt: skip
def test_a_quantity_beyond_what_kubernetes_represents_is_refused(resource: str, value: str) -> None:
    """Today: 19 s under the interpreter lock then a traceback (1e20000000), OverflowError
    (1e400 CPU), ValueError (1e99999 memory); now a refusal naming field, value and bound."""
    body = pod(containers=[container(limits={resource: value})])
    decision = refused(admit(body, SIZED), INVALID_QUANTITY)
    assert f"spec.containers[app].resources.limits.{resource}" in decision.message
    assert value in decision.message
    assert "2^63-1" in decision.message
    # the same on a Fixed profile, whose pods' quantities are not otherwise summed
    refused(admit(body, FIXED), INVALID_QUANTITY)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("1.5Gi", "1536Mi"), ("2048Mi", "2Gi"), ("1000m", "1"), ("0.5", "500m"), ("100n", "100n"),
     ("1e3", "1e3"), ("0.0000000001", "1n"), ("1e-20", "1e-9"), (3, "3"), ("0", "0"),
     ("9223372036854775807", "9223372036854775807")],
)  # fmt: skip
def test_quantities_read_as_apimachinery_reads_them(text: object, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


@pytest.mark.parametrize("text", ["-1", "", ".", "+", "1e", "1K", "1.5.5", " 1", True, None,
                                  [1], "1" * 65])  # fmt: skip
def test_not_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_a_profile_overhead_with_a_huge_exponent_is_invalid_not_computed() -> None:
    """The same path through profile overheads: 1e20000000 used to be expanded exactly."""
    document = profile_document("hv", overhead={"podFixed": {"memory": "1e20000000"}})
    with pytest.raises(ProfileInvalidError) as caught:
        parse_profile(document)
    assert "spec.overhead.podFixed.memory" in str(caught.value)
    assert "2^63-1" in str(caught.value)
    fine = parse_profile(profile_document("hv", overhead={"podFixed": {"memory": "1.5Gi"}}))
    assert fine.spec.effective_overhead() == {"memory": "1536Mi"}


# -- shapes the API server never sends (point 8) --------------------------------------------------

_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"


def _with(**parts: Any) -> dict[str, Any]:
    body = pod("proc")
    body.update(parts)
    return body


@pytest.mark.parametrize(
    "body",
    [
        _with(metadata="p"),
        _with(metadata={"name": "p", "annotations": ["x"]}),
        _with(spec={"runtimeClassName": "hv", "containers": "app"}),
        _with(spec={"runtimeClassName": "hv", "containers": [["app"]]}),
        _with(spec={"runtimeClassName": "hv", "containers": [{"name": "a", "resources": []}]}),
        _with(spec={"runtimeClassName": "hv",
                    "containers": [{"name": "a", "resources": {"limits": "4"}}]}),
        _with(spec={"runtimeClassName": "hv", "securityContext": "x", "containers": []}),
        _with(spec={"runtimeClassName": "hv", "resources": {"limits": [1]}}),
    ],
    ids=["metadata-string", "annotations-list", "containers-string", "container-list",
         "resources-list", "limits-string", "security-context-string", "pod-resources-list"],
)  # fmt: skip
def test_malformed_pods_are_refused_naming_the_field(body: dict[str, Any]) -> None:
    body["spec"] = body.get("spec") if isinstance(body.get("spec"), dict) else pod("hv")["spec"]
    body["spec"]["runtimeClassName"] = "hv"
    for known in (SIZED, FIXED):
        decision = admit(body, known)
        assert isinstance(decision, Refused), decision
        assert decision.reason == MALFORMED_POD, decision


@pytest.mark.parametrize(
    "affinity",
    [
        {"nodeAffinity": []},
        {"nodeAffinity": {_AFFINITY: {"nodeSelectorTerms": {"a": 1}}}},
        {"nodeAffinity": {_AFFINITY: {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node.kubernetes.io/windows-build", "operator": "In",
             "values": [["10.0.17763"]]}]}]}}},
    ],
    ids=["node-affinity-list", "terms-object", "values-list-of-lists"],
)  # fmt: skip
def test_malformed_affinity_of_a_process_pod_is_refused(affinity: dict[str, Any]) -> None:
    process = profiles(profile("proc", isolation="Process", windowsBuild="ltsc2019"))
    refused(admit(pod("proc", affinity=affinity), process), MALFORMED_POD)


def test_pods_of_other_classes_pass_whatever_their_shape() -> None:
    for body in ({"spec": "x"}, {"spec": {"runtimeClassName": ["hv"]}}, {"metadata": 3}):
        assert admitted(admit(body, SIZED)).pod == body


def test_more_containers_or_annotations_than_the_caps_are_refused() -> None:
    many = [container(f"c{i}") for i in range(MAX_CONTAINERS + 1)]
    decision = refused(admit(pod(containers=many), SIZED), POD_TOO_LARGE)
    assert str(MAX_CONTAINERS) in decision.message
    admitted(admit(pod(containers=many[:MAX_CONTAINERS]), SIZED))
    crowded = {f"example.com/k{i}": "v" for i in range(MAX_ANNOTATIONS + 1)}
    refused(admit(pod(annotations=crowded), FIXED), POD_TOO_LARGE)


def test_attacker_text_is_echoed_bounded_and_escaped() -> None:
    flood = "9" * 250_000
    forged = '4\nlevel=info msg="pod admitted" \x1b[2J'
    for value in (flood, forged):
        decision = refused(admit(pod(annotations={CPU: value}), SIZED), ANNOTATION_INVALID)
        assert len(decision.message) < 400
        assert "\n" not in decision.message
        assert "\x1b" not in decision.message
    assert (
        "249936 more characters"
        in refused(admit(pod(annotations={CPU: flood}), SIZED), ANNOTATION_INVALID).message
    )
    long_key = hcs.VM + "x" * 250_000
    decision = refused(admit(pod(annotations={long_key: "1"}), SIZED), ANNOTATION_NOT_ALLOWED)
    assert len(decision.message) < 600
    quantity = refused(
        admit(pod(containers=[container(limits={"memory": flood})]), SIZED), INVALID_QUANTITY
    )
    assert len(quantity.message) < 400


# -- annotations hcsshim reads (point 3) ---------------------------------------------------------


def _verdict(key: str, value: str, known: dict[str, Any]) -> str | None:
    decision = admit(pod(annotations={key: value}), known)
    return decision.reason if isinstance(decision, Refused) else None


def test_processor_limit_and_weight_are_bounded_by_the_profile() -> None:
    capped = profiles(profile("hv", vm={"processorLimit": 50000, "processorWeight": 200}))
    limit = refused(admit(pod(annotations={hcs.PROCESSOR_LIMIT: "100000"}), capped),
                    ANNOTATION_OUT_OF_BOUNDS)  # fmt: skip
    assert "50000" in limit.message
    # No weight on the profile: every sandbox gets containerd's CPU shares of 2.
    weight = refused(admit(pod(annotations={hcs.PROCESSOR_WEIGHT: "10000"}), FIXED),
                     ANNOTATION_OUT_OF_BOUNDS)  # fmt: skip
    assert "every other sandbox" in weight.message
    out = ANNOTATION_OUT_OF_BOUNDS
    for key, value, known, verdict in (
        (hcs.PROCESSOR_LIMIT, "20000", capped, None),
        (hcs.PROCESSOR_WEIGHT, "10000", capped, out),
        (hcs.PROCESSOR_WEIGHT, "150", capped, None),
        (hcs.PROCESSOR_LIMIT, "100000", FIXED, None),
        (hcs.PROCESSOR_LIMIT, "100001", FIXED, out),
        (hcs.PROCESSOR_WEIGHT, "2", FIXED, None),
    ):
        assert _verdict(key, value, known) == verdict, (key, value)


def test_a_pod_that_backs_its_memory_gets_requests_raised_to_limits() -> None:
    body = pod(
        annotations={hcs.PHYSICALLY_BACKED: "true"},
        containers=[container(limits={"memory": "2Gi"}, requests={"memory": "1Gi"})],
    )
    result = admitted(admit(body, SIZED))
    assert result.pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "2Gi"
    committed = pod(
        annotations={hcs.ALLOW_OVERCOMMIT: "false"},
        containers=[container(limits={"memory": "2Gi"})],
    )
    admitted_pod = admitted(admit(committed, SIZED)).pod
    assert admitted_pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "2Gi"
    # A Fixed profile charges a virtually backed VM: the pod cannot make it physical.
    decision = refused(admit(pod(annotations={hcs.PHYSICALLY_BACKED: "true"}), FIXED),
                       ANNOTATION_NOT_ALLOWED)  # fmt: skip
    assert "fullyPhysicallyBacked" in decision.message
    backed = profiles(profile("hv", vm={"fullyPhysicallyBacked": True}))
    admitted(admit(pod(annotations={hcs.PHYSICALLY_BACKED: "true"}), backed))
    admitted(admit(pod(annotations={hcs.PHYSICALLY_BACKED: "false"}), FIXED))


@pytest.mark.parametrize(
    "key",
    [f"{hcs.VM}cpugroup.id", f"{hcs.VM}wcow.additional-reg-keys", f"{hcs.VM}dump-directory-path",
     f"{hcs.VM}kerneldrivers", f"{hcs.VM}bootfilesrootpath", f"{hcs.VM}console.pipe",
     f"{hcs.VM}resource-partition-id", f"{hcs.VM}forwardlogs.sources",
     f"{hcs.VM}lcow.securitypolicy", f"{hcs.VM}some-future-setting"],
)  # fmt: skip
def test_opt_in_annotations_need_the_exact_key_on_the_profile(key: str) -> None:
    decision = refused(admit(pod(annotations={key: "1"}), FIXED), ANNOTATION_NOT_ALLOWED)
    assert "exact key" in decision.message
    opted = profiles(profile("hv", annotations={"pod": [hcs.VM + "*", key]}))
    admitted(admit(pod(annotations={key: "1"}), opted))
    # Not let through by the handler: containerd drops it, nothing to judge.
    closed = profiles(profile("hv", annotations={"pod": []}))
    admitted(admit(pod(annotations={key: "1"}), closed))


def test_harmless_annotations_pass_with_well_formed_values() -> None:
    for key, value in ((f"{hcs.VM}wcow.timezone.noinherit", "true"),
                       (f"{hcs.VM}storageqos.iopsmaximum", "500"),
                       ("io.microsoft.disable-unsafe-operations", "true")):  # fmt: skip
        admitted(admit(pod(annotations={key: value}), FIXED))
    refused(admit(pod(annotations={f"{hcs.VM}wcow.timezone.noinherit": "yes"}), FIXED),
            ANNOTATION_INVALID)  # fmt: skip


def test_host_process_by_annotation_is_refused_on_every_class() -> None:
    """Containerd overwrites microsoft.com/hostprocess-container after copying pod
    annotations, but inherit-user would run a HostProcess container as SYSTEM: both refused
    where the allow-list lets microsoft.com/* through, on process-isolated classes too."""
    loose = {"pod": ["microsoft.com/*", hcs.VM + "*"]}
    known = profiles(
        profile("hv", annotations=loose),
        profile("proc", isolation="Process", windowsBuild="ltsc2022", annotations=loose),
    )
    for runtime_class in ("hv", "proc"):
        for key, value in ((hcs.HOST_PROCESS, "true"),
                           ("microsoft.com/hostprocess-inherit-user", "true"),
                           ("microsoft.com/hostprocess-rootfs-location", "C:\\")):  # fmt: skip
            decision = admit(pod(runtime_class, annotations={key: value}), known)
            refused(decision, ANNOTATION_NOT_ALLOWED)
        admitted(admit(pod(runtime_class, annotations={hcs.HOST_PROCESS: "false"}), known))


def test_the_sizing_annotations_stay_bounded_as_before() -> None:
    refused(admit(pod(annotations={CPU: "240", MEM: "1048576"}), SIZED), ANNOTATION_OUT_OF_BOUNDS)
    refused(admit(pod(annotations={CPU: "240"}), FIXED), ANNOTATION_OUT_OF_BOUNDS)
