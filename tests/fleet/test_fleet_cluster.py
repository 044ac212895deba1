"""The whole loop on the real control plane (``make e2e``): the operator plus 20 simulated
Windows nodes (and two without Hyper-V), and ``wcow-agent simulate`` as users run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    table_cells,
    wait_for,
)
from tests.fleet.harness import (
    View,
    handler_states,
    raw,
    running_fleet,
    running_operator,
    whole_loop,
)
from wcow_contract.labels import READY_VALUE, STARTUP_TAINT, ready_label

pytestmark = pytest.mark.e2e

NODES = 20


def test_whole_loop_on_a_simulated_fleet(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    with installed_crd(kube), namespace(kube, f"{prefix}-ns") as ns:
        whole_loop(
            kube,
            kubeconfig,
            tmp_path,
            ns,
            prefix,
            NODES,
            table=lambda name: table_cells(kube, name),
        )


def test_a_node_pool_whose_pause_image_is_of_another_build(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """Node pools per guest build: on WS2022 hosts, one pool pulls a pause image
    of 10.0.17763, the other the host's. Each pool says which guest build it boots (agent
    status and label); a Hyper-V class of the other build is Failed there with
    GuestBuildUnsupported, listed on the profile and in ``kubectl get wrp``, while the
    profile stays Ready on its own pool."""
    hv22, hv19 = f"{prefix}-g22", f"{prefix}-g19"
    custom = client.CustomObjectsApi(kube)
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig, ns, tmp_path / "operator.log", "--max-unavailable", "100%"
        ) as operator,
        running_fleet(
            kubeconfig, tmp_path / "a", ns, f"{prefix}a", 1, startup_taint=STARTUP_TAINT
        ) as pool22,
        running_fleet(
            kubeconfig,
            tmp_path / "b",
            ns,
            f"{prefix}b",
            2,
            pause_build="10.0.17763",
            startup_taint=STARTUP_TAINT,
        ) as pool19,
        profiles_cleaned_up(kube, [hv22, hv19]),
    ):
        view = View(kube, [pool22, pool19])
        for body in (
            profile(hv22, isolation="HyperV", windowsBuild="ltsc2022"),
            profile(hv19, isolation="HyperV", windowsBuild="ltsc2019"),
        ):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

        body = operator.until(f"{hv22} counted", lambda: view.settled(hv22, 1, 1, 0))
        assert (condition(body, "Ready") or {}).get("status") == "True", body["status"]
        failures = body["status"]["failures"]
        assert sorted(f["node"] for f in failures) == sorted(pool19.nodes)
        assert {f["reason"] for f in failures} == {"GuestBuildUnsupported"}
        assert "10.0.17763" in failures[0]["message"]
        assert "guest build 10.0.20348" in failures[0]["message"]
        assert "GuestBuildUnsupported" in (condition(body, "NodesReady") or {})["message"]
        cells = table_cells(kube, hv22)
        assert cells["Not Ready Because"] == "GuestBuildUnsupported"
        assert cells["Ready Nodes"] == 1
        body = operator.until(f"{hv19} counted", lambda: view.settled(hv19, 2, 2, 0))
        assert [f["node"] for f in body["status"]["failures"]] == list(pool22.nodes)

        label = "node.runtime.wcow.dev/guest-build-"
        for name in pool19.nodes:
            assert handler_states(view, name)[hv22] == ("Failed", "GuestBuildUnsupported")
            assert ready_label(hv22) not in view.labels(name)
            assert view.labels(name)[ready_label(hv19)] == READY_VALUE
            assert view.labels(name).get(f"{label}17763") == "true"
            assert f"{label}20348" not in view.labels(name)
            assert (view.agent_status(name) or {})["guestBuilds"] == ["10.0.17763"]
        for name in pool22.nodes:
            assert handler_states(view, name)[hv19] == ("Failed", "GuestBuildUnsupported")
            assert view.labels(name).get(f"{label}20348") == "true"
            assert view.labels(name)[ready_label(hv22)] == READY_VALUE
        # Registered with the startup taint, as a node pool would be: each agent removed it
        # once every handler had a verdict (Ready here, Failed on the other pool), and only it.
        for name in [*pool22.nodes, *pool19.nodes]:
            taints = [t["key"] for t in view.node(name)["spec"].get("taints") or []]
            # (the node lifecycle controller adds not-ready ones: no kubelet runs here)
            assert STARTUP_TAINT not in taints, (name, taints)
            assert "runtime.wcow.dev/simulated" in taints, (name, taints)


def test_simulate_command_registers_nodes_and_deletes_them_on_sigterm(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    """``wcow-agent simulate`` as a process: Windows Nodes with the kubelet's labels appear,
    each agent reports its host, and SIGTERM removes the Nodes it created."""
    core = client.CoreV1Api(kube)
    names = [f"{prefix}s1", f"{prefix}s2", f"{prefix}s3"]
    log = tmp_path / "simulate.log"
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from wcow_agent.cli import main; raise SystemExit(main())",
                "simulate",
                "--nodes",
                "3",
                "--name-prefix",
                f"{prefix}s",
                "--namespace",
                f"{prefix}-absent",
                "--host-build",
                "10.0.17763",
                "--no-hyperv",
                "--containerd-version",
                "2.0.0",
            ],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:

            def reported() -> list[dict[str, Any]] | None:
                assert process.poll() is None, log.read_text()
                bodies = [raw(core.read_node, n) for n in names]
                done = all(
                    b
                    and "runtime.wcow.dev/agent-status" in (b["metadata"].get("annotations") or {})
                    for b in bodies
                )
                return [b for b in bodies if b] if done else None

            bodies = wait_for("three simulated nodes reporting", reported, timeout=60)
            for body in bodies:
                labels = body["metadata"]["labels"]
                assert labels["kubernetes.io/os"] == "windows"
                assert labels["kubernetes.io/arch"] == "amd64"
                assert labels["node.kubernetes.io/windows-build"] == "10.0.17763"
                assert labels["kubernetes.io/hostname"] == body["metadata"]["name"]
                status = json.loads(
                    body["metadata"]["annotations"]["runtime.wcow.dev/agent-status"]
                )
                assert status["hostBuild"] == "10.0.17763"
                assert status["hypervAvailable"] is False
                assert status["containerdVersion"] == "2.0.0"
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
    assert code == 0, log.read_text()
    assert "deleted 3 Node(s)" in log.read_text()
    for name in names:
        assert raw(core.read_node, name) is None, f"Node {name} left behind"
