"""`helm uninstall` (real Helm) leaves no node with an
agent's table, pause image setting, label or annotation, without the profiles deleted first.

The chart is installed with its defaults (the uninstall hook on, the admission policies where
the server has them). The operator runs as a local process under its ServiceAccount's token;
simulated Windows nodes run the real agent loop (with ``--pause-image``, so each has a pause
image setting of the agent's to undo). The control plane has no kubelet: the job controller
makes the hook Job's pod, and this test plays the kubelet for it, running the pod's command
(``wcow-operator uninstall ...``) under the pod's ServiceAccount token and reporting its exit
in the pod's status, from which the job controller completes (or fails) the Job that
`helm uninstall` waits for. So the hook's order, its RBAC (the operator's ServiceAccount plus
the hook-only ClusterRole), the plan-writers policy and Helm's wait are all real.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
from deploy.generate import CHART
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import GROUP, PLURAL, VERSION, profile, wait_for
from tests.e2e.test_delivery import (
    _crd_exists,
    _server_supports_policy,
    _wait_established,
    raw,
    token_kubeconfig,
)
from tests.fleet.harness import View, running_fleet, running_operator
from tests.fleet.harness import raw as read
from wcow_agent.simulator.fleet import Fleet
from wcow_contract.labels import CONTAINERD_LINE_LABEL, HYPERV_LABEL
from wcow_contract.wire.uninstall import UNINSTALL_ANNOTATION, leftovers

pytestmark = pytest.mark.e2e

PAUSE = "mcr.microsoft.com/oss/kubernetes/pause:3.10"
CRD_NAME = f"{PLURAL}.{GROUP}"


def _pod_token(core: client.CoreV1Api, pod: Any) -> str:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=900,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
            ),
        )
    )
    issued = core.create_namespaced_service_account_token(
        pod.spec.service_account_name, pod.metadata.namespace, request
    )
    return str(issued.status.token)


def _finish(core: client.CoreV1Api, pod: Any, code: int) -> None:
    """What a kubelet reports once the pod's only container exited with ``code``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    container = pod.spec.containers[0]
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                  "startedAt": now, "finishedAt": now}  # fmt: skip
    status = {
        "phase": "Succeeded" if code == 0 else "Failed",
        "startTime": now,
        "containerStatuses": [{
            "name": container.name, "image": container.image, "imageID": "",
            "ready": False, "restartCount": 0, "started": False,
            "state": {"terminated": terminated},
        }],
    }  # fmt: skip
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})


class HookKubelet:
    """Runs the uninstall hook's pod, as the kubelet of a Linux node would."""

    def __init__(self, core: client.CoreV1Api, namespace: str, workdir: Path) -> None:
        self.core = core
        self.namespace = namespace
        self.workdir = workdir
        self.stop = threading.Event()
        self.runs: list[tuple[list[str], int, str]] = []
        self.thread = threading.Thread(target=self._serve, name="hook-kubelet", daemon=True)

    def _serve(self) -> None:
        done: set[str] = set()
        while not self.stop.wait(0.5):
            selector = "app.kubernetes.io/component=uninstall"
            for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
                if pod.metadata.uid in done or pod.metadata.deletion_timestamp:
                    continue
                done.add(pod.metadata.uid)
                self._run(pod)

    def _run(self, pod: Any) -> None:
        container = pod.spec.containers[0]
        assert pod.spec.service_account_name.endswith("-operator"), pod.spec.service_account_name
        kubeconfig = token_kubeconfig(
            _pod_token(self.core, pod), self.namespace, self.workdir / "hook.kubeconfig"
        )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        command = [sys.executable, "-m", "wcow_operator.main", *container.args]
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        self.runs.append((list(container.args), result.returncode, result.stdout + result.stderr))
        _finish(self.core, pod, result.returncode)

    def __enter__(self) -> HookKubelet:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)


@contextlib.contextmanager
def installed(kube: client.ApiClient, kubeconfig: Path, release: str) -> Iterator[bool]:
    """`helm install` of the chart's defaults in a namespace of its own; yields whether the
    admission policies are on. The release is uninstalled by the test itself."""
    policy = _server_supports_policy(kube)
    own_crd = not _crd_exists(kube)
    values = {
        "admissionPolicy": {"enabled": policy},
        "crds": {"enabled": own_crd, "keep": False},
        "uninstall": {"timeoutSeconds": 90},
    }
    core = client.CoreV1Api(kube)
    labels = {"pod-security.kubernetes.io/enforce": "privileged"}
    core.create_namespace(raw({"metadata": {"name": release, "labels": labels}}))
    helm = helm_python.Config(kubeconfig_path=kubeconfig, namespace=release)
    try:
        helm.install(CHART, release, values, namespace=release, timeout=120)
        if own_crd:
            _wait_established(kube, CRD_NAME)
        yield policy
    finally:
        with contextlib.suppress(helm_python.HelmError):
            helm.uninstall(release, ignore_not_found=True, timeout=30)
        helm.close()
        with contextlib.suppress(ApiException):
            core.delete_namespace(release)


def _operator_kubeconfig(kube: client.ApiClient, namespace: str, path: Path) -> Path:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    issued = client.CoreV1Api(kube).create_namespaced_service_account_token(
        f"{namespace}-wcow-runtime-operator", namespace, request
    )
    return token_kubeconfig(str(issued.status.token), namespace, path)


def _node_dirt(view: View, fleet: Fleet, name: str) -> list[str]:
    """What of the agent is left on one simulated node, in the API and on its disk."""
    metadata = view.node(name)["metadata"]
    dirt = leftovers(metadata.get("labels") or {}, metadata.get("annotations") or {})
    sim = fleet.nodes[name]
    if tomllib.loads(sim.disk_text() or "") != tomllib.loads(sim.seeded_text):
        dirt.append(f"config.toml differs from before the agent: {sim.disk_text()}")
    dirt += [p.name for p in sim.config.parent.iterdir() if p.name.startswith("config.toml.")]
    return dirt


def test_helm_uninstall_leaves_every_node_as_before_the_agents(
    kube: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> None:
    release = f"e2e-un-{uuid.uuid4().hex[:5]}"
    custom = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    names = (f"{release}-hv", f"{release}-proc")
    with installed(kube, kubeconfig, release):
        operator_config = _operator_kubeconfig(kube, release, tmp_path / "operator.kubeconfig")
        with (
            running_operator(
                operator_config, release, tmp_path / "operator.log", "--max-unavailable", "100%"
            ) as operator,
            running_fleet(
                kubeconfig, tmp_path / "nodes", release, f"{release}-w", 2, pause_image=PAUSE
            ) as fleet,
        ):
            view = View(kube, [fleet])
            custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                profile(names[0], isolation="HyperV", windowsBuild="ltsc2022"),
            )
            custom.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, profile(names[1], isolation="Process")
            )
            operator.until(
                "both handlers ready on both nodes, with the capability labels",
                lambda: all(
                    view.labels(n).get(f"runtime.wcow.dev/{h}") == "ready"
                    and view.labels(n).get(HYPERV_LABEL) == "true"
                    and view.labels(n).get(CONTAINERD_LINE_LABEL) == "1.7"
                    for n in view.names
                    for h in names
                ),
            )
            for name in view.names:
                assert PAUSE in (fleet.nodes[name].disk_text() or ""), "the agent's pause image"
                assert _node_dirt(view, fleet, name)

            # The guards let the operator write (after the uninstall its RBAC is gone, and
            # its watches are refused until it stops, as a deleted pod's would be).
            assert "Forbidden" not in operator.excerpt(), operator.excerpt()
            helm = helm_python.Config(kubeconfig_path=kubeconfig, namespace=release)
            with HookKubelet(core, release, tmp_path) as kubelet:
                try:
                    helm.uninstall(release, timeout=180)
                finally:
                    helm.close()

            assert [(args, code) for args, code, _ in kubelet.runs] == [
                (["uninstall", f"--namespace={release}", "--timeout=90"], 0)
            ], kubelet.runs
            output = kubelet.runs[0][2]
            assert "uninstalled: " in output, output
            for name in view.names:
                assert _node_dirt(view, fleet, name) == [], (name, output)
            for name in names:
                assert view.profile(name) is None
                # The garbage collector deletes it, by its controller reference, on its own
                # time (profiles carry no finalizer that would hold them until then).
                wait_for(
                    f"RuntimeClass {name} gone",
                    lambda n=name: view.runtime_class(n) is None,
                    timeout=60,
                )
            # The agents, still running here, stay idle: nothing comes back.
            time.sleep(4)
            for name in view.names:
                assert _node_dirt(view, fleet, name) == [], name
            plan = read(core.read_namespaced_config_map, "wcow-runtime-plan", release) or {}
            annotations = (plan.get("metadata") or {}).get("annotations") or {}
            assert UNINSTALL_ANNOTATION not in annotations, "a later install starts clean"
