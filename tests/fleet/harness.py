"""The whole loop on one API server: the real ``wcow-operator`` process, and simulated Windows
nodes running the real agent loop (``wcow_agent.simulator.fleet.Fleet``) in this process.

Everything is judged from outside, as a user would: profiles' status, Node labels and
agent-status annotations, RuntimeClasses, and each simulated node's config.toml on its disk.
The scenario runs on the real control plane (``make e2e``) and on kmock (``make test``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    free_port,
    operator_command,
    profile,
    profiles_cleaned_up,
    read_plan,
    wait_for,
)
from wcow_agent.loop.kubernetes_cluster import KubernetesCluster
from wcow_agent.simulator.containerd import effective_runtimes
from wcow_agent.simulator.faults import parse_fault
from wcow_agent.simulator.fleet import Fleet, FleetCluster, FleetOptions
from wcow_agent.simulator.node import HostSettings
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

TIMEOUT = 120.0


class Operator:
    """The ``wcow-operator`` subprocess; fails a wait at once, with its log, if it died."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path, health_port: int = 0) -> None:
        self.process = process
        self.log = log
        self.health_port = health_port  # its /healthz and /readyz (0: not known)

    def excerpt(self) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return text if len(text) <= 6000 else f"{text[:2000]}\n[...]\n{text[-4000:]}"

    def until(self, what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        def probe() -> Any:
            code = self.process.poll()
            if code is not None:
                raise AssertionError(f"wcow-operator exited with {code}:\n{self.excerpt()}")
            return check()

        try:
            return wait_for(what, probe, timeout=timeout)
        except AssertionError as error:
            if "timed out" in str(error):
                raise AssertionError(f"{error}\noperator log:\n{self.excerpt()}") from None
            raise


@contextlib.contextmanager
def running_operator(
    kubeconfig: Path, namespace: str, log: Path, *extra: str
) -> Iterator[Operator]:
    """``extra``: more ``wcow-operator`` flags (``--max-unavailable 3``)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("POD_NAME", None)
    metrics, health = free_port(), free_port()
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(
            operator_command(namespace, metrics, health, *extra),
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield Operator(process, log)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@contextlib.contextmanager
def running_fleet(
    kubeconfig: Path,
    root: Path,
    namespace: str,
    prefix: str,
    nodes: int,
    *,
    hyperv: bool = True,
    faults: tuple[str, ...] = (),
    restart_seconds: float = 0.05,
    canary_seconds: float = 0.05,
    pause_build: str | None = None,
    startup_taint: str | None = None,
    pause_image: str | None = None,
) -> Iterator[Fleet]:
    """Simulated nodes named ``<prefix>1..N``; their Nodes are deleted afterwards.
    ``pause_build``: the build of the pause image the nodes pull (default: the host's)."""
    options = FleetOptions(
        nodes=nodes,
        namespace=namespace,
        name_prefix=prefix,
        settings=HostSettings(
            hyperv=hyperv,
            restart_seconds=restart_seconds,
            canary_seconds=canary_seconds,
            pause_build=pause_build,
        ),
        faults=[parse_fault(text) for text in faults],
        retry_seconds=2.0,
        drift_check_seconds=5.0,
        startup_taint=startup_taint,
        pause_image=pause_image,
    )

    def cluster() -> FleetCluster:
        return KubernetesCluster.from_kubeconfig(str(kubeconfig))

    fleet = Fleet(options, root, cluster)
    try:
        fleet.start()
        yield fleet
    finally:
        problems = fleet.stop(cleanup=True)
        assert not problems, problems


def raw(call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """The object as the API server sends it; None on 404."""
    try:
        response = call(*args, _preload_content=False, _request_timeout=15)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(json.loads(response.data))


class View:
    """What the cluster and the nodes' disks say."""

    def __init__(self, api: client.ApiClient, fleets: list[Fleet]) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.node_api = client.NodeV1Api(api)
        self.fleets = fleets

    @property
    def names(self) -> list[str]:
        return [name for fleet in self.fleets for name in fleet.nodes]

    def disk_runtimes(self, node: str) -> dict[str, Any]:
        for fleet in self.fleets:
            if node in fleet.nodes:
                sim = fleet.nodes[node]
                return effective_runtimes(sim.disk_text(), sim.settings.containerd_version)[0]
        raise KeyError(node)

    def node(self, name: str) -> dict[str, Any]:
        body = raw(self.core.read_node, name)
        assert body is not None, f"Node {name} is gone"
        return body

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def agent_status(self, name: str) -> dict[str, Any] | None:
        text = (self.node(name)["metadata"].get("annotations") or {}).get(AGENT_STATUS_ANNOTATION)
        return json.loads(text) if text else None

    def profile(self, name: str) -> dict[str, Any] | None:
        return raw(self.custom.get_cluster_custom_object, GROUP, VERSION, PLURAL, name)

    def runtime_class(self, name: str) -> dict[str, Any] | None:
        return raw(self.node_api.read_runtime_class, name)

    def settled(self, name: str, eligible: int, ready: int, failed: int) -> dict[str, Any] | None:
        """The profile once its status counts these nodes for its current generation."""
        body = self.profile(name)
        if body is None:
            return None
        status = body.get("status") or {}
        counts = status.get("nodes") or {}
        current = status.get("observedGeneration") == body["metadata"]["generation"]
        want = {"eligible": eligible, "ready": ready, "failed": failed}
        return body if current and counts == want else None


def handler_states(view: View, node: str) -> dict[str, tuple[str, str]]:
    status = view.agent_status(node) or {}
    return {h: (e["state"], e["reason"]) for h, e in (status.get("handlers") or {}).items()}


def _held_back(view: View, name: str) -> dict[str, Any] | None:
    """The profile once it says its change is held back (RolledOut=False RolloutHalted)."""
    body = view.profile(name)
    rolled = condition(body, "RolledOut") if body else None
    held = rolled and rolled.get("reason") == "RolloutHalted" and "held back" in rolled["message"]
    return body if held else None


def whole_loop(
    api: client.ApiClient,
    kubeconfig: Path,
    workdir: Path,
    namespace: str,
    prefix: str,
    nodes: int,
    *,
    table: Callable[[str], dict[str, Any]] | None = None,
    before_profiles: Callable[[], None] | None = None,
    garbage_collector: bool = True,
) -> None:
    """Profiles in -> plan -> every simulated node merges, proves and reports -> profile
    status; a profile the hosts cannot run is reported per node; a new handler whose canary
    fails on a node is held back (it leaves every node) and the profile names the node and
    why; deleting a profile removes its table and label from every node.

    Two fleets: ``nodes`` Windows Server 2022 hosts with Hyper-V (one of them, ``<prefix>w2``,
    fails the ``flaky`` handler's canary) and two without Hyper-V.

    Pacing is not what this loop is about (tests/fleet/paced.py and test_fleet_rollout.py
    are), so the operator runs with ``--max-unavailable 100%``: every node is let in to a
    plan change at once. At the default (10%: one node at a time here) the outcome would
    hang on timing: a node with none of the agent's tables takes the first plan at once, but
    every later plan change is paced, and the failing canary on ``<prefix>w2`` holds
    ``flaky`` back, so whether the other nodes ever had it would depend on whether the
    operator's (debounced) pass wrote a plan before it had seen all four profiles. ``flaky``
    is created only once the plan holds the other three, so it is always such a later,
    paced change, held back on ``<prefix>w2``'s failure after every node was let in."""
    hv, proc, future, flaky = (f"{prefix}-{s}" for s in ("hv", "proc", "future", "flaky"))
    bad_node = f"{prefix}w{2:0{len(str(nodes))}d}"
    custom = client.CustomObjectsApi(api)
    with (
        running_operator(
            kubeconfig, namespace, workdir / "operator.log", "--max-unavailable", "100%"
        ) as operator,
        running_fleet(
            kubeconfig,
            workdir / "hv",
            namespace,
            f"{prefix}w",
            nodes,
            faults=(f"canary-fail={flaky}@{bad_node}",),
        ) as fleet,
        running_fleet(
            kubeconfig, workdir / "nohv", namespace, f"{prefix}n", 2, hyperv=False
        ) as nohv,
        profiles_cleaned_up(api, [hv, proc, future, flaky]),
    ):
        view = View(api, [fleet, nohv])
        everyone = view.names
        assert len(everyone) == nodes + 2
        operator.until(
            "every simulated node's first report",
            lambda: all(view.agent_status(n) is not None for n in everyone),
        )
        if before_profiles is not None:
            before_profiles()
        for body in (
            profile(
                hv,
                isolation="HyperV",
                windowsBuild="ltsc2022",
                vm={"processorCount": 2, "memoryMB": 2048},
            ),
            profile(proc, isolation="Process"),
            profile(future, isolation="HyperV", windowsBuild="ltsc2025"),
        ):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        # The failing handler as a change to a plan the nodes already have (see above).
        operator.until(
            "a plan with the first three handlers",
            lambda: (
                {hv, proc, future} <= set((read_plan(api, namespace) or {}).get("handlers", {}))
            ),
        )
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(flaky, isolation="Process")
        )

        # Every node that can run a handler has its table, proven: the ready label.
        hyperv_nodes = list(fleet.nodes)
        operator.until(
            "the handlers merged, proven and labelled on every node",
            lambda: (
                all(
                    {hv, proc} <= set(view.disk_runtimes(n))
                    and view.labels(n).get(ready_label(hv)) == READY_VALUE
                    and view.labels(n).get(ready_label(proc)) == READY_VALUE
                    for n in hyperv_nodes
                )
                and all(
                    proc in view.disk_runtimes(n)
                    and view.labels(n).get(ready_label(proc)) == READY_VALUE
                    for n in nohv.nodes
                )
            ),
        )
        for name in everyone:
            assert future not in view.disk_runtimes(name), "an ineligible handler was written"

        # The profiles count the nodes.
        body = operator.until(f"{hv} counted", lambda: view.settled(hv, nodes, nodes, 0))
        assert (condition(body, "Ready") or {}).get("status") == "True", body["status"]
        assert view.runtime_class(hv) is not None
        body = operator.until(
            f"{proc} counted", lambda: view.settled(proc, nodes + 2, nodes + 2, 0)
        )
        assert (condition(body, "Ready") or {}).get("status") == "True", body["status"]

        # A guest build newer than the host: ineligible on every node, each saying why.
        body = operator.until(f"{future} counted", lambda: view.settled(future, 0, 0, 0))
        assert (condition(body, "NodesReady") or {}).get("reason") == "NoEligibleNodes"
        for name in everyone:
            state = handler_states(view, name).get(future)
            why = "HostBuildTooOld" if name in fleet.nodes else "HyperVUnavailable"
            assert state is not None, name
            assert state[0] == "NotEligible", (name, state)
            assert state[1] in (why, "HostBuildTooOld"), (name, state)
        # Hyper-V absent: the HyperV handler is not eligible there, and not written.
        for name in nohv.nodes:
            assert handler_states(view, name)[hv] == ("NotEligible", "HyperVUnavailable")
            assert hv not in view.disk_runtimes(name)
            assert ready_label(hv) not in view.labels(name)

        # A new handler whose canary fails on one node: held back. It never rolled out, so
        # it leaves the plan and every node; the profile names the node and the reason.
        body = operator.until(f"{flaky} held back", lambda: _held_back(view, flaky))
        rolled = condition(body, "RolledOut") or {}
        assert f"{bad_node} (SandboxFailed)" in rolled["message"], rolled
        assert "simulated fault" in rolled["message"], rolled
        assert (condition(body, "Planned") or {}).get("reason") == "HeldBack", body["status"]
        assert (condition(body, "Ready") or {}).get("status") == "False"
        operator.until(
            f"{flaky} off every node",
            lambda: all(
                flaky not in view.disk_runtimes(n) and ready_label(flaky) not in view.labels(n)
                for n in everyone
            ),
        )
        # At rest, containerd runs what is on disk on every node: it restarted with each
        # merged file (checked once the held-back handler's removal went everywhere: with
        # maxUnavailable 100% a node may be between its write and its restart until then).
        simulated = {**fleet.nodes, **nohv.nodes}
        operator.until(
            "containerd running what is on disk on every node",
            lambda: all(s.running_text == s.disk_text() for s in simulated.values()),
        )

        if table is not None:
            cells = table(hv)
            assert cells["Ready"] == "True"
            assert cells["Ready Nodes"] == nodes
            assert cells["Eligible"] == nodes
            assert cells["Handler"] == hv

        # Deleting a profile removes its table and its label from every node.
        restarts = {n: s.restarts for n, s in fleet.nodes.items()}
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, hv)
        operator.until(
            f"{hv}'s table and label gone from every node",
            lambda: all(
                hv not in view.disk_runtimes(n) and ready_label(hv) not in view.labels(n)
                for n in everyone
            ),
        )
        operator.until(f"{hv} gone", lambda: view.profile(hv) is None)
        if garbage_collector:  # the RuntimeClass is the collector's, by its owner reference
            operator.until(f"RuntimeClass {hv} gone", lambda: view.runtime_class(hv) is None)
        for name, sim in fleet.nodes.items():
            assert sim.restarts > restarts[name], f"{name} never restarted containerd"
            assert sim.running_text == sim.disk_text(), name
            assert proc in view.disk_runtimes(name)
            assert flaky not in view.disk_runtimes(name)

    # The fleets deleted the Nodes they created.
    core = client.CoreV1Api(api)
    for name in everyone:
        assert raw(core.read_node, name) is None, f"Node {name} left behind"
