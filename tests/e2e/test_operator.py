"""The real operator against a real API server: create, edit, heal, delete; twice in a row.

Runs when KUBECONFIG points at a cluster (see conftest.py). It installs crds/ if missing
(and removes it again if it installed it), runs in a namespace of its own, and leaves no
objects behind.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    apiserver_requests,
    condition,
    installed_crd,
    metric,
    namespace,
    profile,
    profiles_cleaned_up,
    read_plan,
    running_operator,
    wait_for,
)
from wcow_contract.errors import parse_profile
from wcow_contract.wire.plan import plan_entry
from wcow_operator.render.runtimeclass import render_runtime_class

pytestmark = pytest.mark.e2e


def _get_rc(node: client.NodeV1Api, name: str) -> dict[str, Any] | None:
    try:
        return dict(node.api_client.sanitize_for_serialization(node.read_runtime_class(name)))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _profile_body(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    try:
        return dict(custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _expect_runtime_class(node: client.NodeV1Api, body: dict[str, Any]) -> None:
    """The live RuntimeClass carries exactly what the profile renders to."""
    want = render_runtime_class(parse_profile(body))
    live = wait_for(
        f"RuntimeClass {want['metadata']['name']}", lambda: _get_rc(node, want["metadata"]["name"])
    )
    assert live["handler"] == want["handler"]
    assert live.get("overhead") == want.get("overhead")
    assert live["scheduling"] == want["scheduling"]
    for key, value in want["metadata"]["labels"].items():
        assert live["metadata"]["labels"][key] == value
    (owner,) = [r for r in live["metadata"]["ownerReferences"] if r.get("controller")]
    assert owner["uid"] == body["metadata"]["uid"]
    assert owner["kind"] == "WindowsRuntimeProfile"


@pytest.mark.parametrize("round_", [1, 2], ids=["first-run", "second-run-same-cluster"])
def test_operator_lifecycle(kube: client.ApiClient, prefix: str, round_: int) -> None:
    custom = client.CustomObjectsApi(kube)
    node = client.NodeV1Api(kube)
    names = {k: f"{prefix}-{k}" for k in ("hv", "proc", "small")}
    specs: dict[str, dict[str, Any]] = {
        "hv": {
            "isolation": "HyperV",
            "windowsBuild": "ltsc2022",
            "vm": {"processorCount": 2, "memoryMB": 2048},
        },
        "proc": {
            "isolation": "Process",
            "scheduling": {
                "tolerations": [
                    {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}
                ]
            },
        },
        "small": {
            "isolation": "HyperV",
            "windowsBuild": "10.0.17763",
            "vm": {"processorCount": 1, "memoryMB": 1024},
            "overhead": {"policy": "WholeVM"},
        },
    }
    with (
        installed_crd(kube),
        namespace(kube, prefix) as ns,
        running_operator(ns, "--resync-seconds", "5") as operator,
        profiles_cleaned_up(kube, list(names.values())),
    ):
        # No leftovers from an earlier run: nothing of ours but what we create now.
        leftovers = [
            rc.metadata.name
            for rc in node.list_runtime_class().items
            if rc.metadata.name.startswith("e2e-")
            and (rc.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "wcow-operator"
        ]
        assert leftovers == []

        for key, spec in specs.items():
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, profile(names[key], **spec))
        try:
            for key in specs:
                body = wait_for(
                    f"{names[key]} to be Valid",
                    lambda k=key: (
                        (b := _profile_body(custom, names[k]))
                        and ((condition(b, "Valid") or {}).get("status") == "True")
                        and b["status"].get("observedGeneration") == b["metadata"]["generation"]
                        and b
                    ),
                )
                assert "runtime.wcow.dev/cleanup" not in (body["metadata"].get("finalizers") or [])
                assert body["status"]["handler"] == names[key]
                assert body["status"]["runtimeClassName"] == names[key]
                _expect_runtime_class(node, body)

            plan = wait_for(
                "the plan to hold all three handlers",
                lambda: (
                    (p := read_plan(kube, ns)) and set(names.values()) <= set(p["handlers"]) and p
                ),
            )
            for key in specs:
                body = _profile_body(custom, names[key])
                assert body is not None
                assert plan["handlers"][names[key]] == plan_entry(parse_profile(body)).document()

            # Edit one: a bigger VM; its RuntimeClass overhead and plan entry follow.
            custom.patch_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                names["small"],
                {"spec": {"vm": {"processorCount": 2, "memoryMB": 4096}}},
            )
            wait_for(
                "the edited RuntimeClass",
                lambda: (
                    (rc := _get_rc(node, names["small"]))
                    and rc["overhead"]["podFixed"] == {"cpu": "2", "memory": "4Gi"}
                ),
            )
            wait_for(
                "the edited plan entry",
                lambda: (
                    (p := read_plan(kube, ns))
                    and p["handlers"][names["small"]]["vm"]["memoryMB"] == 4096
                ),
            )

            # Break a RuntimeClass by hand, then delete one: both heal.
            node.patch_runtime_class(names["hv"], {"overhead": {"podFixed": {"cpu": "9"}}})
            wait_for(
                "the hand-edited RuntimeClass to heal",
                lambda: (
                    (rc := _get_rc(node, names["hv"]))
                    and rc["overhead"]["podFixed"] == {"cpu": "100m", "memory": "512Mi"}
                ),
            )
            node.delete_runtime_class(names["proc"])
            wait_for("the deleted RuntimeClass to come back", lambda: _get_rc(node, names["proc"]))

            # An invalid edit is refused by the API server's CEL rules before it is stored.
            with pytest.raises(ApiException) as refused:
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, names["proc"], {"spec": {"vm": {"memoryMB": 2048}}}
                )
            assert refused.value.status == 422
            assert "vm is only valid with isolation HyperV" in str(refused.value.body)

            # Once settled, resync passes (every 5 s here) make no writes at all.
            _settle(operator["metrics"])
            writes = metric(operator["metrics"], "wcow_api_writes_total")
            passes = metric(operator["metrics"], "wcow_reconcile_total")
            wait_for(
                "two more reconcile passes",
                lambda: metric(operator["metrics"], "wcow_reconcile_total") >= passes + 2,
                timeout=30,
            )
            assert metric(operator["metrics"], "wcow_api_writes_total") == writes
        finally:
            for key in specs:
                try:
                    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, names[key])
                except ApiException as error:
                    if error.status != 404:
                        raise

        for key in specs:
            wait_for(
                f"{names[key]} to be gone (nothing holds it)",
                lambda k=key: _profile_body(custom, names[k]) is None,
            )
            wait_for(
                f"RuntimeClass {names[key]} to be gone (the garbage collector)",
                lambda k=key: _get_rc(node, names[k]) is None,
                timeout=120,
            )
        wait_for(
            "the plan without their entries",
            lambda: (
                not set(names.values()) & set((read_plan(kube, ns) or {"handlers": {}})["handlers"])
            ),
        )


def _settle(port: int) -> None:
    """Wait until the operator's write counter stops moving for a few seconds."""
    last = [-1.0]

    def still() -> bool:
        now = metric(port, "wcow_api_writes_total")
        steady, last[0] = now == last[0], now
        if not steady:
            time.sleep(6)
        return steady

    wait_for("the operator to stop writing", still, timeout=90)


def test_orphaned_runtime_class_is_garbage_collected(kube: client.ApiClient, prefix: str) -> None:
    """The RuntimeClass is owned by its profile (ownerReference, controller=true): when the
    profile goes while no operator runs (a profile of an earlier version: its finalizer
    stripped by hand), the cluster's garbage collector removes the RuntimeClass."""
    custom = client.CustomObjectsApi(kube)
    node = client.NodeV1Api(kube)
    name = f"{prefix}-gc"
    with installed_crd(kube), namespace(kube, prefix) as ns, profiles_cleaned_up(kube, [name]):
        with running_operator(ns):
            custom.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, profile(name, isolation="Process")
            )
            wait_for(f"RuntimeClass {name}", lambda: _get_rc(node, name))
        # The operator is stopped: nothing of ours will act on the deletion.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
        )
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        wait_for(f"profile {name} to be gone", lambda: _profile_body(custom, name) is None)
        wait_for(
            f"the garbage collector to delete RuntimeClass {name}",
            lambda: _get_rc(node, name) is None,
            timeout=120,
        )


def test_at_rest_the_api_server_serves_the_operator_nothing_but_its_watches(
    kube: client.ApiClient, prefix: str
) -> None:
    """Counted by the API server itself (apiserver_request_total): once settled, resync passes
    (every 5 s here) read memory, so no list, get or write reaches the server. Run on a
    cluster where nothing else is busy (the local control plane is)."""
    custom = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    names = [f"{prefix}-rest-{i}" for i in range(3)]
    nodes = [f"{prefix}-win-{i}" for i in range(3)]
    with installed_crd(kube), namespace(kube, prefix) as ns:
        for node in nodes:
            core.create_node(
                {"metadata": {"name": node, "labels": {"kubernetes.io/os": "windows"}}}
            )
        try:
            with (
                running_operator(ns, "--resync-seconds", "5") as operator,
                profiles_cleaned_up(kube, names),
            ):
                for name in names:
                    custom.create_cluster_custom_object(
                        GROUP, VERSION, PLURAL, profile(name, isolation="Process")
                    )
                wait_for(
                    "the profiles to be Valid",
                    lambda: all(
                        (condition(_profile_body(custom, n) or {}, "Valid") or {}).get("status")
                        == "True"
                        for n in names
                    ),
                )
                _settle(operator["metrics"])
                passes = metric(operator["metrics"], "wcow_reconcile_total")
                before = apiserver_requests(kube)
                time.sleep(12)
                served = apiserver_requests(kube) - before
                assert metric(operator["metrics"], "wcow_reconcile_total") >= passes + 2
                # Watches stay open (reopening one is a WATCH, allowed); the control plane's own
                # clients renew leases and re-watch other resources. Nothing else may reach
                # what the operator reads or writes.
                # The operator's RBAC has no get on profiles (it reads them by list and watch
                # only); the garbage collector GETs the owners of new RuntimeClasses once it
                # watches the CRD, so a GET of a profile is never the operator's.
                ours = {PLURAL, "runtimeclasses", "configmaps", "nodes", "events"}
                busy = {
                    (verb, resource): n
                    for (verb, resource), n in served.items()
                    if n
                    and resource in ours
                    and verb != "WATCH"
                    and (verb, resource) != ("GET", PLURAL)
                }
                assert busy == {}, busy
        finally:
            for node in nodes:
                core.delete_node(node)
