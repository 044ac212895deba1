"""The paced rollout judged from the nodes themselves: each simulated host's journal says
when its agent applied (preflight of a new config.toml, containerd restart, canaries), so
how many nodes applied at once is measured, not taken from the operator's word.

Shared by tests/fleet/test_fleet_rollout.py (real control plane), the kmock fleet test and
benchmarks/rollout.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    profile,
    profiles_cleaned_up,
    read_plan,
)
from tests.fleet.harness import Operator, View, raw, running_fleet, running_operator
from wcow_agent.simulator.node import JournalEntry, SimulatedNode
from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.wire.rollout import (
    RESUME_ANNOTATION,
    ROLLOUT_CONFIGMAP,
    ROLLOUT_KEY,
    Rollout,
    parse_rollout,
)

MEMORY = "VmMemorySizeInMb"

# Host steps that belong to applying a config: the preflight (``containerd config dump`` of
# the candidate file) opens an apply; the restart and the canaries that follow are part of it.
APPLY_STEPS = frozenset(
    {
        "preflight",
        "restart",
        "restarted",
        "restart-failed",
        "killed",
        "sandbox-start",
        "sandbox-failed",
        "sandbox-removed",
    }
)


@dataclass(frozen=True)
class Window:
    """One node applying one config: its preflight to its last host step before its next
    preflight (restart, rollback, canaries)."""

    node: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def apply_windows(nodes: Mapping[str, SimulatedNode], since: float) -> list[Window]:
    """Every apply that started at or after ``since``, from the hosts' own journals."""
    entries: list[JournalEntry] = []
    for node in nodes.values():
        with node.lock:
            entries.extend(node.journal)
    return journal_windows(entries, since)


def journal_windows(entries: Iterable[JournalEntry], since: float) -> list[Window]:
    """Every apply that started at or after ``since`` in these journal entries (any nodes';
    also a ``wcow-agent simulate --journal`` file's, ``tests.faults.harness``)."""
    by_node: dict[str, list[JournalEntry]] = {}
    for entry in entries:
        if entry.time >= since and entry.event in APPLY_STEPS:
            by_node.setdefault(entry.node, []).append(entry)
    windows: list[Window] = []
    for name, steps in by_node.items():
        start: float | None = None
        end = 0.0
        for entry in sorted(steps, key=lambda e: e.time):
            if entry.event == "preflight":
                if start is not None:
                    windows.append(Window(name, start, end))
                start = end = entry.time
            elif start is not None:
                end = entry.time
        if start is not None:
            windows.append(Window(name, start, end))
    return sorted(windows, key=lambda w: (w.start, w.node))


def peak_overlap(windows: Iterable[Window]) -> int:
    """The most windows open at one instant (one that ends as another starts: not both)."""
    edges = sorted(
        [(w.start, 1) for w in windows] + [(w.end, -1) for w in windows],
        key=lambda edge: (edge[0], edge[1]),
    )
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak


def appliers(
    nodes: Mapping[str, SimulatedNode], since: float, until: float | None = None
) -> set[str]:
    """Nodes whose agent started applying (a preflight) in [since, until]."""
    return {w.node for w in apply_windows(nodes, since) if until is None or w.start <= until}


def read_rollout(api: client.ApiClient, namespace: str) -> Rollout | None:
    body = raw(client.CoreV1Api(api).read_namespaced_config_map, ROLLOUT_CONFIGMAP, namespace)
    if body is None:
        return None
    return parse_rollout((body.get("data") or {}).get(ROLLOUT_KEY))


def plan_hash(api: client.ApiClient, namespace: str) -> str | None:
    plan = read_plan(api, namespace)
    return str(plan["hash"]) if plan else None


# A valid profile change that fails on every node: the runhcs shim at a path where no node
# has one (containerd cannot start it, so every canary fails).
MISSING_SHIM = r"C:\Program Files\containerd\missing\containerd-shim-runhcs-v1.exe"
BAD_CHANGE: dict[str, Any] = {"containerd": {"runtimePath": MISSING_SHIM}}


def patch_spec(api: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"spec": spec}
    )


def annotate_resume(api: client.ApiClient, name: str, value: str) -> None:
    """``kubectl annotate wrp NAME runtime.wcow.dev/resume-rollout=VALUE --overwrite``."""
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"metadata": {"annotations": {RESUME_ANNOTATION: value}}}
    )


def new_plan(operator: Operator, api: client.ApiClient, namespace: str, old: str | None) -> str:
    """The hash of the plan the operator wrote after a change (waits until it differs)."""
    found: str = operator.until(
        "the operator to write the new plan",
        lambda: (h := plan_hash(api, namespace)) != old and h,
    )
    return found


def applied_hash(view: View, node: str) -> str | None:
    status = view.agent_status(node) or {}
    return status.get("appliedPlanHash")


def rolled_out(view: View, name: str, hash_: str, nodes: int) -> dict[str, Any] | None:
    """The profile once it says RolledOut=True for this plan on all ``nodes`` nodes."""
    body = view.profile(name)
    if body is None:
        return None
    status = body.get("status") or {}
    rollout = status.get("rollout") or {}
    done = (condition(body, "RolledOut") or {}).get("status") == "True" and rollout == {
        **rollout,
        "planHash": hash_,
        "updated": nodes,
        "total": nodes,
        "state": "Complete",
    }
    return body if done else None


def halted(view: View, name: str) -> dict[str, Any] | None:
    """The profile's RolledOut condition once it is False for reason RolloutHalted."""
    body = view.profile(name)
    found = condition(body, "RolledOut") if body else None
    if found and found.get("status") == "False" and found.get("reason") == "RolloutHalted":
        return found
    return None


def events(api: client.ApiClient, name: str, reason: str) -> list[dict[str, Any]]:
    """Events about the profile ``name`` with this reason, in any namespace."""
    response = client.CoreV1Api(api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name},reason={reason}",
        _preload_content=False,
        _request_timeout=15,
    )
    items = json.loads(response.data).get("items") or []
    # Filtered here too: kmock ignores field selectors.
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
    ]


def every_node_on(view: View, handler: str, hash_: str, option: tuple[str, Any]) -> bool:
    """Every node applied ``hash_`` (its own report), has the handler's option on disk,
    runs what is on disk, and is labelled ready."""
    key, value = option
    for fleet in view.fleets:
        for name, sim in fleet.nodes.items():
            table = view.disk_runtimes(name).get(handler) or {}
            if (table.get("options") or {}).get(key) != value:
                return False
            if sim.running_text != sim.disk_text():
                return False
            if applied_hash(view, name) != hash_:
                return False
            if view.labels(name).get(ready_label(handler)) != READY_VALUE:
                return False
    return True


def fleet_summary(view: View, api: client.ApiClient, namespace: str, handler: str) -> str:
    """Per node: applied/attempted plan, the handler's state on it, its VM memory on disk and
    its label; and the rollout ConfigMap. For a failure message."""
    body = view.profile(handler) or {}
    lines = [
        f"plan {plan_hash(api, namespace)}",
        f"rollout {read_rollout(api, namespace)!r}",
        f"profile status.rollout {(body.get('status') or {}).get('rollout')} "
        f"RolledOut {condition(body, 'RolledOut')}",
    ]
    for fleet in view.fleets:
        for name in sorted(fleet.nodes):
            status = view.agent_status(name) or {}
            entry = (status.get("handlers") or {}).get(handler) or {}
            table = view.disk_runtimes(name).get(handler) or {}
            lines.append(
                f"{name}: applied={status.get('appliedPlanHash')} "
                f"attempted={status.get('attemptedPlanHash')} "
                f"{entry.get('state')}/{entry.get('reason')} {entry.get('message', '')[:160]!r} "
                f"disk={(table.get('options') or {}).get('VmMemorySizeInMb')} "
                f"label={view.labels(name).get(ready_label(handler))}"
            )
    return "\n".join(lines)


def until(
    operator: Operator,
    what: str,
    check: Callable[[], Any],
    explain: Callable[[], str],
    timeout: float = 120.0,
) -> Any:
    """``operator.until``, and on a timeout what every node says."""
    try:
        return operator.until(what, check, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe fleet:\n{explain()}") from None


def hyperv_on_every_node(
    operator: Operator,
    view: View,
    api: client.ApiClient,
    namespace: str,
    hv: str,
    limit: int | None = None,
    total: int | None = None,
) -> str:
    """Once every node reported: a HyperV profile ``hv`` of 2048 MB (``limit``: its
    spec.rollout.maxUnavailable) created and on every node; the hash of its plan.
    ``total``: as for ``reached``."""
    operator.until(
        "every simulated node's first report",
        lambda: all(view.agent_status(n) is not None for n in view.names),
    )
    rollout = {} if limit is None else {"rollout": {"maxUnavailable": limit}}
    vm = {"processorCount": 2, "memoryMB": 2048}
    body = profile(hv, isolation="HyperV", windowsBuild="ltsc2022", vm=vm, **rollout)
    client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    new_plan(operator, api, namespace, None)
    found: str = until(
        operator,
        f"{hv} on every node",
        lambda: reached(view, api, namespace, hv, (MEMORY, 2048), total),
        lambda: fleet_summary(view, api, namespace, hv),
    )
    return found


def good_then_bad_change(
    api: client.ApiClient,
    kubeconfig: Path,
    workdir: Path,
    namespace: str,
    prefix: str,
    nodes: int,
    limit: int,
) -> None:
    """(a) and (b) of the paced rollout at small N: a good change reaches every node with at
    most ``limit`` applying at once; a bad one (a runtime type no shim implements) stops
    after at most ``limit`` nodes, the others untouched and ready, RolledOut=False
    RolloutHalted naming a failed node, a Warning event."""
    hv = f"{prefix}-hv"
    with (
        running_operator(kubeconfig, namespace, workdir / "operator.log") as operator,
        running_fleet(kubeconfig, workdir / "fleet", namespace, f"{prefix}w", nodes) as fleet,
        profiles_cleaned_up(api, [hv]),
    ):
        view = View(api, [fleet])
        names = sorted(fleet.nodes)

        def explain() -> str:
            return fleet_summary(view, api, namespace, hv)

        first = hyperv_on_every_node(operator, view, api, namespace, hv, limit)

        since = time.time()
        patch_spec(api, hv, {"vm": {"memoryMB": 3072}})
        new_plan(operator, api, namespace, first)
        good = until(
            operator,
            "3072 MB on every node",
            lambda: reached(view, api, namespace, hv, (MEMORY, 3072)),
            explain,
        )
        windows = apply_windows(fleet.nodes, since)
        assert sorted(w.node for w in windows) == names, windows
        assert peak_overlap(windows) <= limit, windows

        before = {n: fleet.nodes[n].disk_text() for n in names}
        since = time.time()
        patch_spec(api, hv, BAD_CHANGE)
        new_plan(operator, api, namespace, good)
        stop = until(operator, f"{hv} RolloutHalted", lambda: halted(view, hv), explain)
        settle(2.0)
        tried = appliers(fleet.nodes, since)
        assert 1 <= len(tried) <= limit, tried
        named = {n for n in names if n in stop["message"]}
        assert named, stop["message"]
        assert named <= tried, (named, tried)
        for name in sorted(set(names) - tried):
            assert fleet.nodes[name].disk_text() == before[name], f"{name} changed config.toml"
            assert view.labels(name).get(ready_label(hv)) == READY_VALUE, name
        notes = events(api, hv, "RolloutHalted")
        assert notes, "no RolloutHalted event"
        assert all(e["type"] == "Warning" for e in notes), notes


def reached(
    view: View,
    api: client.ApiClient,
    namespace: str,
    handler: str,
    option: tuple[str, Any],
    total: int | None = None,
) -> str | None:
    """The current plan's hash once every node runs it (``every_node_on``) and the profile
    says RolledOut for it; read afresh each time, as the operator may write the plan twice
    for one change (the finalizer, then the spec). ``total``: the nodes the profile counts
    when some run outside the view's fleets (default: the fleets' nodes)."""
    hash_ = plan_hash(api, namespace)
    nodes = total or sum(len(fleet.nodes) for fleet in view.fleets)
    if (
        hash_
        and every_node_on(view, handler, hash_, option)
        and rolled_out(view, handler, hash_, nodes)
    ):
        return hash_
    return None


def settle(seconds: float) -> None:
    """Give the fleet time to do what it should not (apply past a halt, without an
    operator): longer than one node's apply and the latency of a watch."""
    time.sleep(seconds)
