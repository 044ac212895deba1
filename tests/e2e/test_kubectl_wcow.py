"""``kubectl wcow`` on the real control plane, as a read-only person runs it: the real
``wcow-operator`` and three simulated Windows nodes (the real agent loop), a rollout halted by a
canary that fails on one node, and the plugin run as a program under the token of a
ServiceAccount bound to exactly the chart's ``<fullname>-viewer`` ClusterRole and Role.

What the real API server cannot show: there are no kubelets, so no operator or agent pods and
no logs; the bundle says so ("no operator pods"), and tests/plugin/test_diagnose.py covers
the logs (with ``--previous``) against an in-memory reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.delivery.helpers import render
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    installed_crd,
    namespace,
    profile,
    profiles_cleaned_up,
    read_plan,
)
from tests.e2e.test_delivery import can, token_client, token_kubeconfig
from tests.fleet.harness import View, running_fleet, running_operator
from tests.fleet.paced import read_rollout

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).with_name("kubectl-wcow")


@contextlib.contextmanager
def chart_identity(kube: client.ApiClient, release: str, ns: str, component: str) -> Iterator[str]:
    """The chart's roles and bindings of ``component`` (rendered by Helm) applied as they are;
    yields a token of the ServiceAccount they bind. ``viewer``: the viewer roles bound
    through ``viewer.subjects`` to a new ServiceAccount; ``test``: the helm test's own
    ServiceAccount and roles (its hook annotations mean nothing outside Helm)."""
    account = f"{release}-reader"
    values: dict[str, Any] = {
        "viewer": {"subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]},
        "crds": {"enabled": False},
        "profiles": {"create": True},
    }
    objects = [
        o
        for o in render(values, release=release, namespace=ns)
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == component
        and o["kind"] != "Pod"
    ]
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    if component == "viewer":
        core.create_namespaced_service_account(ns, {"metadata": {"name": account}})
    else:
        account = next(o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount")
    assert {o["kind"] for o in objects} >= {
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    create = {
        "ServiceAccount": lambda body: core.create_namespaced_service_account(ns, body),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "Role": lambda body: rbac.create_namespaced_role(ns, body),
        "RoleBinding": lambda body: rbac.create_namespaced_role_binding(ns, body),
    }
    for obj in objects:
        create[obj["kind"]](obj)
    try:
        request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
        token = core.create_namespaced_service_account_token(account, ns, request)
        yield str(token.status.token)
    finally:
        name = next(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole")
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(name)


def plugin(*args: str, config: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(config)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [str(PLUGIN), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def members(bundle: Path) -> dict[str, str]:
    with tarfile.open(bundle) as archive:
        return {
            m.name.split("/", 1)[1]: archive.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in archive.getmembers()
        }


def test_status_and_diagnose_under_exactly_the_viewer_roles(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    hv, flaky = f"{prefix}-hv", f"{prefix}-flaky"
    bad = f"{prefix}w2"
    custom = client.CustomObjectsApi(kube)
    with (
        installed_crd(kube),
        namespace(kube, f"{prefix}-ns") as ns,
        running_operator(
            kubeconfig, ns, tmp_path / "operator.log", "--max-unavailable", "100%",
            "--leader-election",  # the Lease the bundle reads
        ) as operator,
        running_fleet(
            kubeconfig, tmp_path / "fleet", ns, f"{prefix}w", 3,
            faults=(f"canary-fail={flaky}@{bad}",),
        ) as fleet,
        profiles_cleaned_up(kube, [hv, flaky, f"{prefix}-future"]),
        chart_identity(kube, prefix, ns, "viewer") as token,
        chart_identity(kube, prefix, ns, "test") as tester,
    ):  # fmt: skip
        view = View(kube, [fleet])
        body = profile(
            hv,
            isolation="HyperV",
            windowsBuild="ltsc2022",
            vm={"processorCount": 2, "memoryMB": 2048},
        )
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        operator.until(
            "the plan with hv", lambda: hv in ((read_plan(kube, ns) or {}).get("handlers") or {})
        )
        operator.until(f"{hv} ready on 3 nodes", lambda: view.settled(hv, 3, 3, 0))
        # A change that fails on one node: held back (it never rolled out: it leaves every
        # node again), the rest of the rollout goes on.
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, profile(flaky, isolation="Process")
        )
        operator.until(
            f"{flaky} held back after {bad} failed, and off every node",
            lambda: _held_and_gone(kube, ns, view, flaky),
        )

        config = token_kubeconfig(token, ns, tmp_path / "viewer.kubeconfig")
        reader = token_client(token)
        assert not can(reader, "list", "", "secrets", ns)
        assert not can(reader, "patch", GROUP, PLURAL, None, hv)
        _check_status(config, ns, flaky, bad)
        _check_diagnose(config, ns, tmp_path, flaky, bad, token)
        _check_kubectl_finds_the_plugin(config, ns)
        _check_verify(kube, tester, ns, tmp_path, hv, f"{prefix}-future")


def _held_and_gone(kube: client.ApiClient, ns: str, view: View, flaky: str) -> bool:
    rollout = read_rollout(kube, ns)
    if rollout is None or flaky not in rollout.held:
        return False
    return all(flaky not in view.disk_runtimes(n) for n in view.names)


def _check_status(config: Path, ns: str, flaky: str, bad: str) -> None:
    shown = plugin("status", "-n", ns, config=config)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    held = next(line for line in lines if line.startswith("HELD BACK since"))
    assert f"profile {flaky}" in held, shown.stdout
    assert "NodeFailed" in held, held
    assert f"{bad} (SandboxFailed)" in held, held
    assert f"kubectl annotate wrp {flaky} runtime.wcow.dev/resume-rollout" in shown.stdout
    document = json.loads(plugin("status", "-n", ns, "-o", "json", config=config).stdout)
    profiles = {p["name"]: p for p in document["profiles"]}
    assert "RolloutHalted" in profiles[flaky]["rolled_out"], profiles[flaky]
    assert document["rollout"]["held"][flaky]["nodes"] == bad
    nodes = {n["name"]: n for n in document["nodes"]}
    assert nodes[bad]["rollout"] == "done"  # it went back: flaky's table left it
    assert all(n["hyperv"] == "true" and n["build"] == "10.0.20348" for n in nodes.values())


def _check_diagnose(
    config: Path, ns: str, tmp_path: Path, flaky: str, bad: str, token: str
) -> None:
    out = tmp_path / "bundles"
    out.mkdir()
    made = plugin("diagnose", "-n", ns, "-o", str(out), config=config)
    assert made.returncode == 0, made.stderr
    (bundle,) = out.glob("wcow-diagnose-*.tar.gz")
    files = members(bundle)
    readme = files["README.txt"]
    # Everything the bundle reads is granted by the viewer roles: nothing was refused.
    assert "everything was read." in readme, readme
    assert "no operator pods (app.kubernetes.io/part-of=wcow-runtime" in readme  # no kubelets
    parts = ["profiles.yaml", "runtimeclasses.yaml", "plan.yaml", "rollout.yaml", "events.yaml",
             "leader.yaml", "webhooks.yaml", "status.txt", f"nodes/{bad}.yaml"]  # fmt: skip
    for name in parts:
        assert name in files, name
    assert {p["metadata"]["name"] for p in yaml.safe_load(files["profiles.yaml"])} >= {flaky}
    held = json.loads(yaml.safe_load(files["rollout.yaml"])["data"]["rollout.json"])["held"]
    assert held[flaky]["nodes"][0]["node"] == bad
    node = yaml.safe_load(files[f"nodes/{bad}.yaml"])
    assert flaky not in node["agentStatus"]["handlers"]  # held back: it left the node
    assert any(e["reason"] == "RolloutHalted" for e in yaml.safe_load(files["events.yaml"]))
    assert yaml.safe_load(files["leader.yaml"])["spec"]["holderIdentity"]
    assert token not in "".join(files.values())
    # One node only.
    single = tmp_path / "single"
    single.mkdir()
    made = plugin("diagnose", "-n", ns, "--node", bad, "-o", str(single), config=config)
    assert made.returncode == 0, made.stderr
    (bundle,) = single.glob("*.tar.gz")
    assert [n for n in members(bundle) if n.startswith("nodes/")] == [f"nodes/{bad}.yaml"]


def _check_kubectl_finds_the_plugin(config: Path, ns: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return  # kubectl's own plugin lookup cannot be shown here; the entry point is
    path = f"{PLUGIN.parent}{os.pathsep}{Path(kubectl).parent}"
    listed = subprocess.run(
        [kubectl, "plugin", "list"], env={**os.environ, "PATH": path},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert str(PLUGIN) in listed.stdout, listed.stdout + listed.stderr
    shown = subprocess.run(
        [kubectl, "wcow", "status", "-n", ns],
        env={**os.environ, "PATH": path, "KUBECONFIG": str(config)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "HELD BACK" in shown.stdout, shown.stdout


def _check_verify(
    kube: client.ApiClient, token: str, ns: str, tmp_path: Path, hv: str, future: str
) -> None:
    """The helm test's command under the helm test's RBAC. A profile no node is ready for is
    skipped; the check pod of a ready one is created (no kubelet and no scheduler here: it
    never starts, so the check fails at its deadline, saying so) and deleted."""
    custom = client.CustomObjectsApi(kube)
    body = profile(future, isolation="HyperV", windowsBuild="ltsc2025")  # newer than the hosts
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    config = token_kubeconfig(token, ns, tmp_path / "tester.kubeconfig")
    args = ["verify", "-n", ns, "--profile", hv, "--profile", future, "--timeout-seconds", "5"]
    checked = plugin(*args, config=config)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert f"FAIL  {hv}: did not start within 5 s (no node took it)" in lines, lines
    assert any(line.startswith(f"SKIP  {future}: no node is ready") for line in lines), lines
    left = client.CoreV1Api(kube).list_namespaced_pod(
        ns, label_selector="app.kubernetes.io/component=wcow-verify"
    )
    assert left.items == [], "a check pod was left behind"


def test_a_user_without_the_viewer_roles_is_told_what_to_bind(
    kube: client.ApiClient, kubeconfig: Path, prefix: str, tmp_path: Path
) -> None:
    with installed_crd(kube), namespace(kube, f"{prefix}-ns") as ns:
        core = client.CoreV1Api(kube)
        core.create_namespaced_service_account(ns, {"metadata": {"name": "nobody"}})
        request: dict[str, Any] = {"spec": {"audiences": [], "expirationSeconds": 600}}
        token = core.create_namespaced_service_account_token("nobody", ns, request).status.token
        config = token_kubeconfig(str(token), ns, tmp_path / "nobody.kubeconfig")
        shown = plugin("status", "-n", ns, config=config)
        assert shown.returncode == 1
        assert "403 Forbidden" in shown.stderr
        assert "wcow-runtime-viewer ClusterRole and Role" in shown.stderr
        out = tmp_path / "bundle"
        out.mkdir()
        made = plugin("diagnose", "-n", ns, "-o", str(out), config=config)
        assert made.returncode == 0, made.stderr  # a bundle of what could be read
        assert "could not read: list WindowsRuntimeProfiles: 403 Forbidden" in made.stdout
