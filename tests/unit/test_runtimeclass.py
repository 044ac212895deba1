"""The RuntimeClass a profile renders to: handler, overhead and scheduling."""

from __future__ import annotations

from tests.conftest import MakeProfile, profile_document
from wcow_contract.errors import parse_profile
from wcow_contract.labels import CONTAINERD_LINE_LABEL, HYPERV_LABEL
from wcow_operator.render.runtimeclass import render_runtime_class


def test_hyperv_class_is_gated_on_the_ready_label_with_baseline_overhead(
    make_profile: MakeProfile,
) -> None:
    rc = render_runtime_class(make_profile("hyperv-ltsc2022"))
    assert rc["apiVersion"] == "node.k8s.io/v1"
    assert rc["kind"] == "RuntimeClass"
    assert rc["metadata"]["name"] == "hyperv-ltsc2022"
    assert rc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "wcow-operator"
    assert rc["handler"] == "hyperv-ltsc2022"
    assert rc["overhead"] == {"podFixed": {"cpu": "100m", "memory": "512Mi"}}
    assert rc["scheduling"] == {
        "nodeSelector": {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "windows",
            "runtime.wcow.dev/hyperv-ltsc2022": "ready",
        }
    }
    assert "ownerReferences" not in rc["metadata"]


def test_handler_override_names_the_ready_label(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(make_profile("big", handler="runhcs-big"))
    assert rc["handler"] == "runhcs-big"
    assert rc["scheduling"]["nodeSelector"]["runtime.wcow.dev/runhcs-big"] == "ready"


def test_whole_vm_overhead_charges_the_vm_size(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(
        make_profile(vm={"processorCount": 1, "memoryMB": 2048}, overhead={"policy": "WholeVM"})
    )
    assert rc["overhead"] == {"podFixed": {"cpu": "1", "memory": "2Gi"}}


def test_physically_backed_vm_defaults_to_whole_vm_overhead(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(make_profile(vm={"fullyPhysicallyBacked": True}))
    assert rc["overhead"] == {"podFixed": {"cpu": "2", "memory": "1Gi"}}


def test_no_overhead_for_process_or_policy_none(make_profile: MakeProfile) -> None:
    assert "overhead" not in render_runtime_class(make_profile(isolation="Process"))
    assert "overhead" not in render_runtime_class(make_profile(overhead={"policy": "None"}))


def test_explicit_pod_fixed_wins(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(make_profile(overhead={"podFixed": {"memory": "300Mi"}}))
    assert rc["overhead"] == {"podFixed": {"memory": "300Mi"}}


def test_ungated_process_profile_pins_the_windows_build(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(
        make_profile(
            isolation="Process", windowsBuild="ltsc2019", scheduling={"requireReadyLabel": False}
        )
    )
    assert rc["scheduling"]["nodeSelector"] == {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "windows",
        "node.kubernetes.io/windows-build": "10.0.17763",
    }


def test_ungated_hyperv_profile_selects_all_windows_nodes(make_profile: MakeProfile) -> None:
    rc = render_runtime_class(make_profile(scheduling={"requireReadyLabel": False}))
    assert rc["scheduling"]["nodeSelector"] == {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "windows",
    }


def test_user_selector_and_tolerations_are_merged(make_profile: MakeProfile) -> None:
    toleration = {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}
    rc = render_runtime_class(
        make_profile(
            sandbox={"platform": "windows/amd64"},
            scheduling={
                "nodeSelector": {"pool": "hyperv"},
                "tolerations": [toleration, toleration, {"operator": "Exists"}],
            },
        )
    )
    assert rc["scheduling"]["nodeSelector"]["pool"] == "hyperv"
    assert rc["scheduling"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    assert rc["scheduling"]["tolerations"] == [toleration, {"operator": "Exists"}]


def test_profile_from_a_cluster_owns_its_runtime_class() -> None:
    document = profile_document("hv")
    document["metadata"].update(uid="1234-abcd", generation=3)
    rc = render_runtime_class(parse_profile(document))
    assert rc["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "runtime.wcow.dev/v1alpha1",
            "kind": "WindowsRuntimeProfile",
            "name": "hv",
            "uid": "1234-abcd",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_a_profile_selects_nodes_by_their_capability_labels() -> None:
    """docs/profiles.md "Capability labels": the agents' node.runtime.wcow.dev/ labels are not the
    managed ready labels, so a profile may select on them; the RuntimeClass carries them."""
    selector = {HYPERV_LABEL: "true", CONTAINERD_LINE_LABEL: "2.1"}
    document = profile_document("hv", scheduling={"nodeSelector": selector})
    node_selector = render_runtime_class(parse_profile(document))["scheduling"]["nodeSelector"]
    assert {k: node_selector[k] for k in selector} == selector
    assert node_selector["runtime.wcow.dev/hv"] == "ready"
