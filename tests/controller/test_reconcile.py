"""The pure reconcile: observed objects in, writes, statuses and events out."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.controller.builders import NAMESPACE, observed, profile_body, windows_node
from wcow_contract.wire.plan import PLAN_KEY, plan_document
from wcow_operator.reconcile.model import (
    FINALIZER,
    Observed,
    ObservedNode,
    Outcome,
    ReconcileSettings,
    Write,
)
from wcow_operator.reconcile.reconciler import reconcile

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = ReconcileSettings(namespace=NAMESPACE)


def run(state: Observed, settings: ReconcileSettings = SETTINGS) -> Outcome:
    return reconcile(state, settings, NOW)


def kinds(outcome: Outcome) -> list[tuple[str, str]]:
    return [(w.kind, w.target) for w in outcome.writes]


def apply(state: Observed, outcome: Outcome) -> Observed:
    """What the cluster looks like after the writes succeeded (a tiny in-memory apiserver)."""
    profiles = {p.name: p.body for p in state.profiles}
    runtime_classes = dict(state.runtime_classes)
    config_map = state.plan_config_map
    rollout = state.rollout_config_map
    for write in outcome.writes:
        body = profiles.get(write.target)
        if write.kind in (
            "create-runtime-class",
            "replace-runtime-class",
            "recreate-runtime-class",
        ):
            runtime_classes[write.target] = write.body
        elif write.kind == "delete-runtime-class":
            runtime_classes.pop(write.target)
        elif write.kind == "write-plan":
            config_map = write.body
        elif write.kind == "write-rollout":
            rollout = write.body
        elif write.kind == "remove-finalizer":
            profiles.pop(write.target)
        elif write.kind == "update-status" and body is not None:
            body["status"] = write.body["status"]
    return observed(
        *profiles.values(),
        runtime_classes=list(runtime_classes.values()),
        plan_config_map=config_map,
        nodes=state.nodes,
        rollout_config_map=rollout,
    )


def edited(
    state: Observed, body: dict[str, Any], plan_config_map: dict[str, Any] | None = None
) -> Observed:
    """The cluster of ``state`` after the one profile was edited to ``body`` (and the plan
    ConfigMap replaced by ``plan_config_map``, when given)."""
    return observed(
        body,
        runtime_classes=list(state.runtime_classes.values()),
        plan_config_map=plan_config_map or state.plan_config_map,
        rollout_config_map=state.rollout_config_map,
    )


def converge(state: Observed) -> tuple[Observed, Outcome]:
    outcome = run(state)
    return apply(state, outcome), outcome


def condition(outcome: Outcome, profile: str, type_: str) -> dict[str, Any]:
    return next(c for c in outcome.statuses[profile]["conditions"] if c["type"] == type_)


def test_new_profile_gets_runtime_class_plan_and_status_and_no_finalizer() -> None:
    outcome = run(observed(profile_body("hv", finalizers=[])))
    assert kinds(outcome) == [
        ("create-runtime-class", "hv"),
        ("write-plan", "wcow-runtime-plan"),
        ("write-rollout", "wcow-runtime-rollout"),
        ("update-status", "hv"),
    ]
    rc = outcome.writes[0].body
    assert rc["handler"] == "hv"
    assert rc["metadata"]["ownerReferences"][0]["uid"] == "uid-hv"
    plan_cm = outcome.writes[1].body
    assert plan_cm["metadata"]["namespace"] == NAMESPACE
    assert "hv" in outcome.plan["handlers"]
    status = outcome.statuses["hv"]
    assert status["observedGeneration"] == 1
    assert status["handler"] == "hv"
    assert status["runtimeClassName"] == "hv"
    assert condition(outcome, "hv", "Valid")["status"] == "True"
    assert condition(outcome, "hv", "RuntimeClassReady")["status"] == "True"
    assert condition(outcome, "hv", "NodesReady")["reason"] == "NoEligibleNodes"
    assert condition(outcome, "hv", "Ready")["status"] == "False"
    assert outcome.events == []  # the status says RuntimeClassReady; no event per profile


def test_steady_state_makes_no_writes_and_no_events() -> None:
    state, _ = converge(observed(profile_body("hv"), profile_body("p", isolation="Process")))
    outcome = run(state)
    assert outcome.writes == []
    assert outcome.events == []


def test_each_runtime_class_field_change_replaces_it() -> None:
    state, _ = converge(observed(profile_body("hv")))
    for spec in (
        {"overhead": {"podFixed": {"cpu": "1"}}},
        {"scheduling": {"nodeSelector": {"pool": "a"}}},
        {"scheduling": {"tolerations": [{"key": "os", "operator": "Exists"}]}},
        {"scheduling": {"requireReadyLabel": False}},
    ):
        body = profile_body("hv", generation=2, status=state.profiles[0].status, **spec)
        changed = observed(
            body,
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
        outcome = run(changed)
        assert ("replace-runtime-class", "hv") in kinds(outcome), spec
        replaced = next(w for w in outcome.writes if w.kind == "replace-runtime-class")
        assert replaced.observed == state.runtime_classes["hv"]
        assert [e.reason for e in outcome.events if e.reason.startswith("RuntimeClass")] == [
            "RuntimeClassUpdated"
        ]


def test_handler_change_recreates_the_runtime_class_and_says_so() -> None:
    state, _ = converge(observed(profile_body("hv")))
    body = profile_body("hv", generation=2, status=state.profiles[0].status, handler="hv-new")
    outcome = run(
        observed(
            body,
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    recreate = next(w for w in outcome.writes if w.kind == "recreate-runtime-class")
    assert recreate.body["handler"] == "hv-new"
    assert recreate.observed is not None
    assert "resourceVersion" not in recreate.body["metadata"]
    assert set(outcome.plan["handlers"]) == {"hv-new"}
    replaced = [e for e in outcome.events if e.reason == "RuntimeClassReplaced"]
    assert "from hv to hv-new" in replaced[0].message


def test_hand_edited_runtime_class_is_restored_keeping_foreign_labels() -> None:
    state, _ = converge(observed(profile_body("hv")))
    edited = dict(state.runtime_classes["hv"])
    edited = {
        **edited,
        "handler": "hv",
        "overhead": {"podFixed": {"cpu": "5"}},
        "metadata": {
            **edited["metadata"],
            "resourceVersion": "7",
            "labels": {**edited["metadata"]["labels"], "team": "x"},
        },
    }
    outcome = run(
        observed(
            *[p.body for p in state.profiles],
            runtime_classes=[edited],
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert kinds(outcome) == [("replace-runtime-class", "hv")]
    body = outcome.writes[0].body
    assert body["overhead"] == {"podFixed": {"cpu": "100m", "memory": "512Mi"}}
    assert body["metadata"]["labels"]["team"] == "x"
    assert body["metadata"]["resourceVersion"] == "7"
    assert [e.reason for e in outcome.events] == ["RuntimeClassRestored"]


def test_deleted_runtime_class_is_created_again() -> None:
    state, _ = converge(observed(profile_body("hv")))
    outcome = run(
        observed(
            *[p.body for p in state.profiles],
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert kinds(outcome) == [("create-runtime-class", "hv")]


def test_invalid_profile_keeps_last_good_runtime_class_and_plan_entry() -> None:
    state, _ = converge(observed(profile_body("hv", vm={"memoryMB": 2048})))
    good_plan = state.plan
    broken = profile_body(
        "hv", generation=2, status=state.profiles[0].status, vm={"memoryMB": 2047}
    )
    outcome = run(edited(state, broken))
    assert kinds(outcome) == [("update-status", "hv")]  # no RuntimeClass or plan write
    assert outcome.plan == good_plan
    valid = condition(outcome, "hv", "Valid")
    assert valid["status"] == "False"
    assert "spec.vm.memoryMB" in valid["message"]
    assert "2047" in valid["message"]
    assert condition(outcome, "hv", "Planned")["reason"] == "LastGoodKept"
    assert condition(outcome, "hv", "Ready")["reason"] == "InvalidSpec"
    warning = [e for e in outcome.events if e.type == "Warning"]
    assert warning[0].reason == "InvalidSpec"
    assert "spec.vm.memoryMB" in warning[0].message

    # Fixing it recovers, with no restart of anything.
    after = apply(edited(state, broken), outcome)
    fixed = profile_body("hv", generation=3, status=after.profiles[0].status, vm={"memoryMB": 4096})
    recovered = run(edited(after, fixed))
    assert ("write-plan", "wcow-runtime-plan") in kinds(recovered)
    assert condition(recovered, "hv", "Valid")["status"] == "True"
    assert "SpecValid" in [e.reason for e in recovered.events]


@pytest.mark.parametrize(
    ("field", "forged"),
    [
        # A shim of the forger's choosing, re-hashed into the plan ConfigMap.
        ("runtime", lambda entry: entry["runtime"].update(runtime_path="C:\\evil.exe")),
        # The profile's uid of another profile: an entry this profile never had.
        ("uid", lambda entry: entry.update(uid="not-this-profile")),
    ],
)
def test_a_forged_last_good_entry_is_not_written_again(
    field: str, forged: Callable[[dict[str, Any]], None]
) -> None:
    """A profile that turns invalid keeps the plan's entry for it; the operator re-emits that
    entry only when it is what the renderer makes of its spec, so a forged plan is not kept
    alive by the operator's own writes."""
    state, _ = converge(observed(profile_body("hv", vm={"memoryMB": 2048})))
    plan = json.loads(state.plan_config_map["data"][PLAN_KEY])
    forged(plan["handlers"]["hv"])
    forged_plan = plan_document(plan["handlers"])
    config_map = copy.deepcopy(state.plan_config_map)
    config_map["data"][PLAN_KEY] = json.dumps(forged_plan)
    broken = profile_body(
        "hv", generation=2, status=state.profiles[0].status, vm={"memoryMB": 2047}
    )
    outcome = run(edited(state, broken, plan_config_map=config_map))
    assert "hv" not in outcome.plan["handlers"], field
    assert condition(outcome, "hv", "Planned")["reason"] == "InvalidSpec"


@pytest.mark.parametrize(
    ("older", "kept"),
    [
        # As an operator wrote entries before they carried their spec.
        (lambda entry: entry.pop("spec"), True),
        # Without a spec, and not of that shape either: nobody's operator wrote it.
        (lambda entry: (entry.pop("spec"), entry.update(runtime="C:\\evil.exe")), False),
    ],
    ids=["older-operator", "not-an-entry"],
)
def test_an_entry_without_a_spec_is_kept_only_in_the_shape_an_older_operator_wrote(
    older: Callable[[dict[str, Any]], None], kept: bool
) -> None:
    state, _ = converge(observed(profile_body("hv", vm={"memoryMB": 2048})))
    plan = json.loads(state.plan_config_map["data"][PLAN_KEY])
    older(plan["handlers"]["hv"])
    config_map = copy.deepcopy(state.plan_config_map)
    config_map["data"][PLAN_KEY] = json.dumps(plan_document(plan["handlers"]))
    broken = profile_body(
        "hv", generation=2, status=state.profiles[0].status, vm={"memoryMB": 2047}
    )
    outcome = run(edited(state, broken, plan_config_map=config_map))
    if kept:
        assert outcome.plan["handlers"]["hv"] == plan["handlers"]["hv"]
        assert condition(outcome, "hv", "Planned")["reason"] == "LastGoodKept"
    else:
        assert "hv" not in outcome.plan["handlers"]
        assert condition(outcome, "hv", "Planned")["reason"] == "InvalidSpec"


def test_a_profile_that_relied_on_coercion_turns_invalid_and_keeps_the_last_good() -> None:
    """A stored profile with "yes" for a boolean (the API server refuses it; a CRD that does
    not check types could store it) used to be read as true; now it is Valid=False, and the
    RuntimeClass and plan entry stay as they were."""
    state, _ = converge(observed(profile_body("hv", vm={"fullyPhysicallyBacked": True})))
    coerced = profile_body(
        "hv", generation=2, status=state.profiles[0].status, vm={"fullyPhysicallyBacked": "yes"}
    )
    outcome = run(edited(state, coerced))
    assert kinds(outcome) == [("update-status", "hv")]  # no RuntimeClass or plan write
    assert outcome.plan == state.plan
    valid = condition(outcome, "hv", "Valid")
    assert valid["status"] == "False"
    assert "spec.vm.fullyPhysicallyBacked: must be true or false" in valid["message"]
    assert "(got 'yes')" in valid["message"]
    assert condition(outcome, "hv", "Planned")["reason"] == "LastGoodKept"


def test_invalid_new_profile_gets_no_runtime_class_and_no_plan_entry() -> None:
    outcome = run(observed(profile_body("bad", vm={"memoryMB": 3})))
    assert ("create-runtime-class", "bad") not in kinds(outcome)
    assert outcome.plan["handlers"] == {}
    assert condition(outcome, "bad", "RuntimeClassReady")["reason"] == "InvalidSpec"


def test_runtime_class_owned_by_someone_else_is_never_taken_over() -> None:
    foreign = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "hv", "resourceVersion": "3"},
        "handler": "other",
    }
    outcome = run(observed(profile_body("hv"), runtime_classes=[foreign]))
    assert not [w for w in outcome.writes if "runtime-class" in w.kind]
    rc = condition(outcome, "hv", "RuntimeClassReady")
    assert rc["reason"] == "RuntimeClassConflict"
    assert "not owned by this profile" in rc["message"]
    assert outcome.statuses["hv"].get("runtimeClassName") is None


def test_two_profiles_claiming_one_handler_both_stay_out_of_the_plan() -> None:
    state, _ = converge(observed(profile_body("a", handler="shared")))
    outcome = run(
        observed(
            *[p.body for p in state.profiles],
            profile_body("b", handler="shared"),
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert outcome.plan["handlers"] == {}
    for name in ("a", "b"):
        planned = condition(outcome, name, "Planned")
        assert planned["reason"] == "HandlerConflict"
        assert "shared" in planned["message"]
    assert ("create-runtime-class", "b") not in kinds(outcome)


def test_a_deleted_profile_leaves_the_plan_and_its_runtime_class_to_the_collector() -> None:
    state, _ = converge(observed(profile_body("hv"), profile_body("keep")))
    outcome = run(
        observed(
            state.profiles[1].body,
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert kinds(outcome) == [
        ("write-plan", "wcow-runtime-plan"),
        ("write-rollout", "wcow-runtime-rollout"),
    ]
    assert set(outcome.plan["handlers"]) == {"keep"}


def test_the_earlier_finalizer_goes_after_the_plan_and_the_runtime_class() -> None:
    state, _ = converge(observed(profile_body("hv"), profile_body("keep")))
    gone = profile_body(
        "hv", deleting=True, finalizers=[FINALIZER], status=state.profiles[0].status
    )
    outcome = run(
        observed(
            gone,
            state.profiles[1].body,
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert kinds(outcome) == [
        ("write-plan", "wcow-runtime-plan"),
        ("write-rollout", "wcow-runtime-rollout"),
        ("delete-runtime-class", "hv"),
        ("remove-finalizer", "hv"),
    ]
    assert all(w.after_plan for w in outcome.writes[1:])
    assert set(outcome.plan["handlers"]) == {"keep"}


def test_node_counts_and_failures_come_from_agents_and_labels() -> None:
    nodes = [
        windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",)),
        windows_node("n2", {"hv": ("Failed", "CanaryTimeout")}),
        windows_node("n3", {"hv": ("NotEligible", "HostBuildTooOld")}),
        windows_node("n4", {"hv": ("Pending", "Applying")}),
        windows_node("n5"),
    ]
    outcome = run(observed(profile_body("hv"), nodes=nodes))
    status = outcome.statuses["hv"]
    assert status["nodes"] == {"eligible": 3, "ready": 1, "failed": 1}
    assert status["failures"] == [
        {"node": "n2", "reason": "CanaryTimeout", "message": "CanaryTimeout on n2"}
    ]
    nodes_ready = condition(outcome, "hv", "NodesReady")
    assert nodes_ready["reason"] == "NodesFailed"
    assert "1/3 eligible" in nodes_ready["message"]
    assert "n2: CanaryTimeout" in nodes_ready["message"]


def test_nodes_whose_pause_image_boots_another_guest_build_are_named_not_counted() -> None:
    """A node pool of another guest build (its agent says Failed, GuestBuildUnsupported: the
    handler is applied, but the node's pause image boots another build) keeps the profile
    Ready on its own pool, and the profile and ``kubectl get wrp`` say which nodes and why."""
    nodes = [
        windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",)),
        windows_node("n2", {"hv": ("Failed", "GuestBuildUnsupported")}),
    ]
    outcome = run(observed(profile_body("hv"), nodes=nodes))
    status = outcome.statuses["hv"]
    assert status["nodes"] == {"eligible": 1, "ready": 1, "failed": 0}
    assert status["failures"] == [
        {"node": "n2", "reason": "GuestBuildUnsupported", "message": "GuestBuildUnsupported on n2"}
    ]
    assert condition(outcome, "hv", "Ready")["status"] == "True"
    message = condition(outcome, "hv", "NodesReady")["message"]
    assert "1 Windows nodes cannot run it (GuestBuildUnsupported: see failures)" in message
    # Only such nodes: no eligible node, and the reason is said.
    alone = run(observed(profile_body("hv"), nodes=nodes[1:]))
    assert condition(alone, "hv", "NodesReady")["reason"] == "NoEligibleNodes"
    assert "GuestBuildUnsupported" in condition(alone, "hv", "NodesReady")["message"]


def test_a_class_its_selector_keeps_on_no_node_says_which_nodes_apply_it() -> None:
    """Nodes the profile's own nodeSelector leaves out report nothing of the handler (they
    do not apply it): with none left, the profile is NoEligibleNodes and says why."""
    body = profile_body(
        "hv", scheduling={"nodeSelector": {"node.runtime.wcow.dev/guest-build-17763": "true"}}
    )
    nodes = [windows_node("n1", {"other": ("Ready", "CanaryPassed")}, ready=("other",))]
    outcome = run(observed(body, nodes=nodes))
    nodes_ready = condition(outcome, "hv", "NodesReady")
    assert nodes_ready["reason"] == "NoEligibleNodes"
    assert (
        "only nodes labelled node.runtime.wcow.dev/guest-build-17763=true"
        in (nodes_ready["message"])
    )
    assert "spec.scheduling.nodeSelector" in nodes_ready["message"]
    assert condition(outcome, "hv", "Stalled")["reason"] == "NoEligibleNodes"
    assert outcome.plan["handlers"]["hv"]["nodeSelector"] == {
        "node.runtime.wcow.dev/guest-build-17763": "true"
    }


def test_nodes_whose_containerd_drops_a_setting_are_named_in_the_failures() -> None:
    """A node whose containerd line cannot honour the handler (its agent says NotEligible,
    ContainerdTooOld) is not counted as eligible, but the profile says which nodes and why,
    instead of a silent 0/0."""
    nodes = [
        windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",)),
        windows_node("n2", {"hv": ("NotEligible", "ContainerdTooOld")}),
        windows_node("n3", {"hv": ("NotEligible", "HostBuildTooOld")}),
    ]
    outcome = run(observed(profile_body("hv"), nodes=nodes))
    status = outcome.statuses["hv"]
    assert status["nodes"] == {"eligible": 1, "ready": 1, "failed": 0}
    assert status["failures"] == [
        {"node": "n2", "reason": "ContainerdTooOld", "message": "ContainerdTooOld on n2"}
    ]
    message = condition(outcome, "hv", "NodesReady")["message"]
    assert "1 Windows nodes cannot run it (ContainerdTooOld" in message


def test_ready_when_every_eligible_node_is_ready() -> None:
    nodes = [windows_node("n1", {"hv": ("Ready", "CanaryPassed")}, ready=("hv",))]
    state, _ = converge(observed(profile_body("hv"), nodes=nodes))
    outcome = run(state)
    assert outcome.writes == []
    assert condition(outcome, "hv", "Ready")["status"] == "True"


def test_ungated_profile_is_ready_without_agents() -> None:
    outcome = run(
        observed(
            profile_body(
                "p",
                isolation="Process",
                windowsBuild="ltsc2022",
                scheduling={"requireReadyLabel": False},
            )
        )
    )
    assert condition(outcome, "p", "Ready")["status"] == "True"


def test_required_node_gating_refuses_ungated_profiles() -> None:
    outcome = run(
        observed(profile_body("p", isolation="Process", scheduling={"requireReadyLabel": False})),
        ReconcileSettings(namespace=NAMESPACE, require_node_gating=True),
    )
    valid = condition(outcome, "p", "Valid")
    assert valid["status"] == "False"
    assert "--require-node-gating" in valid["message"]


def test_oversized_plan_keeps_what_nodes_have_and_says_why() -> None:
    state, _ = converge(observed(profile_body("a")))
    small = ReconcileSettings(
        namespace=NAMESPACE, plan_max_bytes=len(state.plan_config_map["data"]["plan.json"]) + 10
    )  # type: ignore[index]
    outcome = reconcile(
        observed(
            *[p.body for p in state.profiles],
            profile_body("b"),
            runtime_classes=list(state.runtime_classes.values()),
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        ),
        small,
        NOW,
    )
    assert set(outcome.plan["handlers"]) == {"a"}
    assert ("write-plan", "wcow-runtime-plan") not in kinds(outcome)
    planned = condition(outcome, "b", "Planned")
    assert planned["reason"] == "PlanTooLarge"
    assert "1 MiB" in planned["message"]


def test_lost_transition_time_only_moves_on_status_change() -> None:
    state, first = converge(observed(profile_body("hv")))
    stamp = condition(first, "hv", "Valid")["lastTransitionTime"]
    later = reconcile(state, SETTINGS, datetime(2026, 3, 2, tzinfo=UTC))
    assert condition(later, "hv", "Valid")["lastTransitionTime"] == stamp


def test_writes_are_data_only() -> None:
    outcome = run(observed(profile_body("hv", finalizers=[])))
    assert all(isinstance(w, Write) for w in outcome.writes)


def test_oversized_plan_without_a_previous_plan_fills_up_to_the_limit() -> None:
    profiles = [profile_body(f"p{i}", isolation="Process") for i in range(10)]
    full = run(observed(*profiles))
    limit = ReconcileSettings(namespace=NAMESPACE, plan_max_bytes=full.plan_bytes * 6 // 10)
    outcome = reconcile(observed(*profiles), limit, NOW)
    assert 0 < len(outcome.plan["handlers"]) < 10
    assert outcome.plan_bytes <= limit.plan_max_bytes
    waiting = [
        n for n in outcome.statuses if condition(outcome, n, "Planned")["reason"] == "PlanTooLarge"
    ]
    assert len(waiting) + len(outcome.plan["handlers"]) == 10


def test_orphaned_runtime_class_survives_profile_deletion() -> None:
    """Kubectl delete wrp --cascade=orphan: the garbage collector drops the owner reference
    first; the RuntimeClass must then stay."""
    state, _ = converge(observed(profile_body("hv")))
    orphan = dict(state.runtime_classes["hv"])
    orphan["metadata"] = {k: v for k, v in orphan["metadata"].items() if k != "ownerReferences"}
    gone = profile_body(
        "hv", deleting=True, finalizers=[FINALIZER], status=state.profiles[0].status
    )
    outcome = run(
        observed(
            gone,
            runtime_classes=[orphan],
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    assert ("delete-runtime-class", "hv") not in kinds(outcome)
    assert ("remove-finalizer", "hv") in kinds(outcome)


def test_restoring_a_runtime_class_keeps_finalizers_and_annotations_of_others() -> None:
    state, _ = converge(observed(profile_body("hv")))
    edited = dict(state.runtime_classes["hv"])
    edited["metadata"] = {
        **edited["metadata"],
        "finalizers": ["example.com/keep"],
        "annotations": {**edited["metadata"]["annotations"], "note": "x"},
    }
    edited["handler"] = "hv"
    edited["scheduling"] = {"nodeSelector": {"kubernetes.io/os": "windows"}}
    outcome = run(
        observed(
            *[p.body for p in state.profiles],
            runtime_classes=[edited],
            plan_config_map=state.plan_config_map,
            rollout_config_map=state.rollout_config_map,
        )
    )
    body = next(w.body for w in outcome.writes if w.kind == "replace-runtime-class")
    assert body["metadata"]["finalizers"] == ["example.com/keep"]
    assert body["metadata"]["annotations"]["note"] == "x"
    assert body["metadata"]["annotations"]["runtime.wcow.dev/profile"] == "hv"


def test_long_profile_names_are_annotated_not_labelled() -> None:
    name = "a" * 70 + ".example"
    outcome = run(observed(profile_body(name, handler="long")))
    rc = next(w.body for w in outcome.writes if w.kind == "create-runtime-class")
    assert "runtime.wcow.dev/profile" not in rc["metadata"]["labels"]
    assert rc["metadata"]["annotations"]["runtime.wcow.dev/profile"] == name


def test_no_eligible_node_says_why_the_nodes_cannot_run_it() -> None:
    """Instead of a bare "0/0 eligible", the agents' NotEligible reasons,
    grouped by what they say, most nodes first; node text escaped and bounded."""
    too_old = (
        "guest build 10.0.26100 is newer than the host's 10.0.20348; Hyper-V isolation "
        "needs host build >= guest build"
    )
    nodes = []
    for i in range(3):
        node = windows_node(f"old{i}", {"hv": ("NotEligible", "HostBuildTooOld")})
        nodes.append(_with_message(node, "hv", too_old))
    hostile = "no Hyper-V\nn9: all good" + "x" * 5000
    plain = windows_node("plain", {"hv": ("NotEligible", "HyperVUnavailable")}, hyperv=False)
    nodes.append(_with_message(plain, "hv", hostile))
    outcome = run(observed(profile_body("hv"), nodes=nodes))
    nodes_ready = condition(outcome, "hv", "NodesReady")
    assert nodes_ready["reason"] == "NoEligibleNodes"
    message = nodes_ready["message"]
    assert f"3 nodes: HostBuildTooOld ({too_old})" in message
    assert "1 node: HyperVUnavailable (no Hyper-V\\nn9: all good" in message
    assert "\n" not in message
    assert len(message) < 1024


def _with_message(node: ObservedNode, handler: str, message: str) -> ObservedNode:
    status = json.loads(node.agent_status or "{}")
    status["handlers"][handler]["message"] = message
    return dataclasses.replace(node, agent_status=json.dumps(status))
