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

from tests.e2e.operator_harness import installed_crd, namespace, table_cells, wait_for
from tests.fleet.harness import raw, whole_loop

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
