"""Processes the fault suite and ``benchmarks/soak.py`` start, kill and start again: operator
replicas with leader election, and simulated agents in processes of their own
(``wcow-agent simulate``) whose host steps go to a journal file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client

from tests.control_plane import terminate
from tests.e2e.operator_harness import free_port, operator_command
from tests.fleet.harness import Operator
from wcow_agent.simulator.node import JournalEntry
from wcow_operator.rbac import OPERATOR_LEASE


@contextlib.contextmanager
def replica(
    kubeconfig: Path, ns: str, name: str, log: Path, *extra: str, health: int | None = None
) -> Iterator[tuple[Operator, int]]:
    """One ``wcow-operator`` replica named ``name`` (its Lease identity and its webhook CA's
    name) with leader election, its probes on ``health`` (default: a free port); yields it
    and its metrics port."""
    metrics, health = free_port(), health or free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAME": name}
    command = [*operator_command(ns, metrics, health, *extra), "--leader-election"]
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield Operator(process, log, health), metrics
        finally:
            terminate(process, 30)


def lease(kube: client.ApiClient, ns: str) -> tuple[str | None, int]:
    """(holder, transitions) of the operator's Lease; (None, 0) before there is one."""
    try:
        spec = client.CoordinationV1Api(kube).read_namespaced_lease(OPERATOR_LEASE, ns).spec
    except client.exceptions.ApiException:
        return None, 0
    return (spec.holder_identity, spec.lease_transitions or 0) if spec else (None, 0)


@contextlib.contextmanager
def simulated_agent(
    kubeconfig: Path,
    ns: str,
    prefix: str,
    journal: Path,
    log: Path,
    *flags: str,
    nodes: int = 1,
    stop_seconds: float = 60,
) -> Iterator[subprocess.Popen[bytes]]:
    """``nodes`` simulated nodes in one ``wcow-agent simulate`` process of their own
    (``flags``: more of its flags); their Nodes are deleted when it stops (unless
    ``--no-cleanup``)."""
    command = [
        sys.executable, "-c", "from wcow_agent.cli import main; raise SystemExit(main())",
        "simulate", "--nodes", str(nodes), "--name-prefix", prefix, "--namespace", ns,
        "--journal", str(journal), *flags,
    ]  # fmt: skip
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(
            command,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGCONT)  # a stopped process would not hear SIGTERM
            terminate(process, stop_seconds)


def journal_entries(journal: Path) -> list[JournalEntry]:
    """The host steps a ``wcow-agent simulate --journal`` wrote (a line cut short by a kill
    is skipped)."""
    if not journal.exists():
        return []
    entries = []
    for line in journal.read_text(encoding="utf-8").splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        entries.append(JournalEntry(e["time"], e["node"], e["event"], e.get("detail", "")))
    return entries


def preflights(journal: Path, since: float) -> list[float]:
    """When the process's nodes started applying (a host's preflight), from the journal."""
    return [e.time for e in journal_entries(journal) if e.event == "preflight" and e.time >= since]
