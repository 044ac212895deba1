"""A node cannot vouch for itself, on the real control plane.

Two honest simulated Windows Server 2022 nodes run the real agent loop; three more Nodes are
written by hand, as a compromised node (or a thief of the agent's token) would write its own
labels and agent-status annotation: one that claims an ltsc2022 Hyper-V handler ready on a
10.0.17763 host without Hyper-V, one whose failure message pretends to be lines about the
honest nodes, one whose reason does. The operator must count only the honest nodes as ready
and put no node's text into the profile's status unescaped.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    read_plan,
)
from tests.fleet.harness import View, running_fleet, running_operator
from wcow_contract.catalog.windows_builds import WINDOWS_BUILD_LABEL
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

pytestmark = pytest.mark.e2e


def hostile_message(*victims: str) -> str:
    lines = "".join(f"\n- node: {v}\n  reason: ContainerdRolledBack" for v in victims)
    return f"canary failed{lines}\x1b[2J\x1b[31m\r\u2028\u202e"


@contextlib.contextmanager
def written_nodes(api: client.ApiClient, bodies: list[dict[str, Any]]) -> Iterator[None]:
    core = client.CoreV1Api(api)
    for body in bodies:
        core.create_node(body)
    try:
        yield
    finally:
        for body in bodies:
            with contextlib.suppress(ApiException):
                core.delete_node(body["metadata"]["name"])


def lying_node(name: str, build: str, report: dict[str, Any], ready: list[str]) -> dict[str, Any]:
    """A Node as a compromised host writes it: the kubelet's labels, its own ready labels
    and agent report. Tainted like the simulator's, so no pod lands on it."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/os": "windows",
                "kubernetes.io/arch": "amd64",
                WINDOWS_BUILD_LABEL: build,
                **{ready_label(handler): READY_VALUE for handler in ready},
            },
            "annotations": {AGENT_STATUS_ANNOTATION: json.dumps(report)},
        },
        "spec": {"taints": [{"key": "example.com/liar", "effect": "NoSchedule"}]},
    }


def test_a_lying_node_is_not_counted_ready_and_its_text_is_escaped(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    hv = f"{prefix}-hv"
    liar, loud, shouter = f"{prefix}liar", f"{prefix}loud", f"{prefix}shout"
    custom = client.CustomObjectsApi(kube)
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig, ns, tmp_path / "operator.log", "--max-unavailable", "100%"
        ) as operator,
        running_fleet(kubeconfig, tmp_path / "fleet", ns, f"{prefix}w", 2) as fleet,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        honest = list(fleet.nodes)
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(hv, isolation="HyperV", windowsBuild="ltsc2022")
        )
        operator.until("both honest nodes ready", lambda: view.settled(hv, 2, 2, 0))
        current = (read_plan(kube, ns) or {})["hash"]

        def report(build: str, hyperv: bool, state: str, reason: str, message: str) -> Any:
            return {
                "schemaVersion": 1,
                "hostBuild": build,
                "hypervAvailable": hyperv,
                "appliedPlanHash": current,
                "attemptedPlanHash": current,
                "handlers": {hv: {"state": state, "reason": reason, "message": message}},
            }

        nodes = [
            # The node: too old for the guest, and no Hyper-V at all.
            lying_node(
                liar,
                "10.0.17763",
                report("10.0.17763", False, "Ready", "CanaryPassed", "ok"),
                ready=[hv],
            ),
            # A real failure whose message reads as lines about the honest nodes.
            lying_node(
                loud,
                "10.0.20348",
                report("10.0.20348", True, "Failed", "CanaryFailed", hostile_message(*honest)),
                ready=[],
            ),
            # A reason that names the honest nodes as failed: the report is not read at all.
            lying_node(
                shouter,
                "10.0.20348",
                report("10.0.20348", True, "Failed", f"Failed\n{honest[0]}: CanaryTimeout", "x"),
                ready=[],
            ),
        ]
        with written_nodes(kube, nodes):
            body = operator.until(
                "the written nodes counted", lambda: view.settled(hv, eligible=3, ready=2, failed=1)
            )

        status = body["status"]
        failures = {f["node"]: f for f in status["failures"]}
        assert set(failures) == {liar, loud}, failures
        assert failures[liar]["reason"] == "ReportInconsistent"
        assert "10.0.17763 host without Hyper-V" in failures[liar]["message"]
        assert failures[loud]["reason"] == "CanaryFailed"
        message = failures[loud]["message"]
        assert message.isprintable(), message
        assert f"\\n- node: {honest[0]}\\n" in message
        assert "\\x1b[2J" in message
        nodes_ready = condition(body, "NodesReady")
        assert nodes_ready is not None
        assert nodes_ready["message"].isprintable()
        assert f"{loud}: CanaryFailed" in nodes_ready["message"]
        assert "1 Windows nodes report that they can run it" in nodes_ready["message"]
        assert "1 Windows nodes report no agent status yet" in nodes_ready["message"]
        for name in honest:
            assert name not in nodes_ready["message"], nodes_ready["message"]
        for entry in status["conditions"]:
            assert entry["message"].isprintable(), entry
