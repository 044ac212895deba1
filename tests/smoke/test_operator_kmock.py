"""Smoke: the real ``wcow-operator`` process against kmock, an in-process Kubernetes API
emulator (see kube_apiserver.py for what it does and does not emulate).

Where the e2e tests need a cluster, this runs anywhere kmock is installed: it checks the
wiring a unit test cannot (kubeconfig loading, the informers' lists and watches, the
client calls and their bodies, finalizers, the status subresource, optimistic concurrency)
by watching what a user would see through the API: a profile goes in; a RuntimeClass, a plan
entry, a status and an event come out; an edit follows through; deleting the
profile removes its plan entry (its RuntimeClass is the garbage collector's).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import (
    CRD_FILE,
    GROUP,
    PLURAL,
    VERSION,
    condition,
    free_port,
    operator_command,
    profile,
    read_plan,
    wait_for,
)
from wcow_contract.errors import parse_profile
from wcow_contract.wire.plan import plan_entry
from wcow_operator.reconcile.model import FINALIZER
from wcow_operator.render.runtimeclass import render_runtime_class

pytest.importorskip(
    "kmock",
    reason="kmock (the Kubernetes API emulator this smoke test runs against) is not installed",
)

from tests.smoke.kube_apiserver import ApiServer, running_apiserver, write_kubeconfig

NAMESPACE = "wcow-system"
EVENT_NAMESPACE = "default"  # events about cluster-scoped objects must live there
NAME = "smoke-hv"
TIMEOUT = 45.0  # per wait; the whole test normally takes a few seconds


class Operator:
    """The ``wcow-operator`` subprocess and what is needed to judge it."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path, health: int) -> None:
        self.process = process
        self.log = log
        self.health = health

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def log_excerpt(self) -> str:
        text = self.log_text()
        return text if len(text) <= 8000 else f"{text[:3000]}\n[...]\n{text[-5000:]}"

    def alive(self) -> None:
        """Fail right away, with the log, once the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise AssertionError(
                f"wcow-operator exited with code {code}; its log:\n{self.log_excerpt()}"
            )

    def until(self, what: str, check: Any, timeout: float = TIMEOUT) -> Any:
        def probe() -> Any:
            self.alive()
            return check()

        try:
            return wait_for(what, probe, timeout=timeout)
        except AssertionError as error:
            if "timed out" in str(error):
                raise AssertionError(f"{error}\noperator log:\n{self.log_excerpt()}") from None
            raise


@contextlib.contextmanager
def running_operator(kubeconfig: Path, log: Path) -> Iterator[Operator]:
    metrics, health = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("POD_NAME", None)
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(
            operator_command(NAMESPACE, metrics, health),
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield Operator(process, log, health)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _watched(apiserver: ApiServer) -> set[str]:
    """The resources someone has opened a watch on, as group/version/plural."""
    return {
        f"{r.resource.group}/{r.resource.version}/{r.resource.plural}"
        for r in list(apiserver)
        if r.resource is not None and r.params.get("watch") == "true"
    }


def _raw(call: Any, *args: Any) -> dict[str, Any] | None:
    """The object as the API server sends it (no client model in between); None on 404."""
    try:
        response = call(*args, _preload_content=False, _request_timeout=10)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(json.loads(response.data))


def test_operator_reconciles_a_profile_through_the_api(tmp_path: Path) -> None:
    crd = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    with running_apiserver(crd) as (apiserver, url):
        for ns in (NAMESPACE, EVENT_NAMESPACE):
            apiserver.add_object("v1/namespaces", None, {"metadata": {"name": ns}})
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        kube = config.new_client_from_config(config_file=str(kubeconfig))
        custom, node, core = (
            client.CustomObjectsApi(kube),
            client.NodeV1Api(kube),
            client.CoreV1Api(kube),
        )

        def get_profile() -> dict[str, Any] | None:
            return _raw(custom.get_cluster_custom_object, GROUP, VERSION, PLURAL, NAME)

        def get_rc() -> dict[str, Any] | None:
            return _raw(node.read_runtime_class, NAME)

        try:
            with running_operator(kubeconfig, tmp_path / "operator.log") as operator:
                operator.until("/readyz (a first successful pass)", lambda: _ready(operator.health))
                # the informers watch what the controller depends on; waiting for them means
                # the create below is seen as an event, not at the next resync (5 min).
                wanted = {
                    f"{GROUP}/{VERSION}/{PLURAL}",
                    "node.k8s.io/v1/runtimeclasses",
                    "/v1/nodes",
                }
                operator.until("kopf's watches", lambda: wanted <= _watched(apiserver))
                time.sleep(0.5)

                custom.create_cluster_custom_object(
                    GROUP,
                    VERSION,
                    PLURAL,
                    profile(
                        NAME,
                        isolation="HyperV",
                        windowsBuild="ltsc2022",
                        vm={"processorCount": 2, "memoryMB": 2048},
                        overhead={"policy": "WholeVM"},
                        scheduling={
                            "tolerations": [
                                {
                                    "key": "os",
                                    "operator": "Equal",
                                    "value": "windows",
                                    "effect": "NoSchedule",
                                }
                            ]
                        },
                    ),
                )

                # The profile: a status with Valid=True for this generation, and no finalizer
                # (nothing holds a profile: the plan is recomputed from those that exist).
                body = operator.until(
                    "the profile to be Valid",
                    lambda: (
                        (b := get_profile())
                        and (condition(b, "Valid") or {}).get("status") == "True"
                        and b["status"].get("observedGeneration") == b["metadata"]["generation"]
                        and b
                    ),
                )
                assert body["status"]["handler"] == NAME
                assert FINALIZER not in (body["metadata"].get("finalizers") or [])
                valid = condition(body, "Valid")
                assert valid is not None
                assert valid["reason"] == "SpecValid"
                assert valid["observedGeneration"] == body["metadata"]["generation"]

                # The RuntimeClass: exactly what the profile renders to, owned by the profile.
                want = render_runtime_class(parse_profile(body))
                rc = operator.until("the RuntimeClass", get_rc)
                assert rc["handler"] == NAME
                assert rc["overhead"] == {"podFixed": {"cpu": "2", "memory": "2Gi"}}
                assert rc["overhead"] == want["overhead"]
                assert rc["scheduling"] == want["scheduling"]
                assert rc["scheduling"]["tolerations"][0]["key"] == "os"
                assert rc["scheduling"]["nodeSelector"]["kubernetes.io/os"] == "windows"
                assert rc["metadata"]["labels"] == want["metadata"]["labels"]
                (owner,) = rc["metadata"]["ownerReferences"]
                assert owner["uid"] == body["metadata"]["uid"]
                assert owner["kind"] == "WindowsRuntimeProfile"
                assert owner["controller"] is True

                # The plan ConfigMap: the handler's entry, as the agent will read it.
                plan = operator.until(
                    "the plan to hold the handler",
                    lambda: (p := read_plan(kube, NAMESPACE)) and NAME in p["handlers"] and p,
                )
                assert plan["handlers"][NAME] == plan_entry(parse_profile(body)).document()

                # An edit follows through: RuntimeClass overhead (a PUT with the observed
                # resourceVersion), plan entry, and observedGeneration of the new generation.
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, NAME, {"spec": {"vm": {"memoryMB": 4096}}}
                )
                operator.until(
                    "the RuntimeClass overhead to follow the edit",
                    lambda: (rc := get_rc()) and rc["overhead"]["podFixed"]["memory"] == "4Gi",
                )
                operator.until(
                    "the plan entry to follow the edit",
                    lambda: (
                        (p := read_plan(kube, NAMESPACE))
                        and p["handlers"][NAME]["vm"]["memoryMB"] == 4096
                    ),
                )
                edited = operator.until(
                    "the status to observe generation 2",
                    lambda: (
                        (b := get_profile())
                        and b["metadata"]["generation"] == 2
                        and b["status"].get("observedGeneration") == 2
                        and b
                    ),
                )
                assert (condition(edited, "Valid") or {}).get("status") == "True"

                # An event says what changed (kubectl describe shows it); events are posted
                # at the end of a pass, once their write succeeded.
                def reasons() -> set[str]:
                    events = _raw(core.list_namespaced_event, EVENT_NAMESPACE) or {}
                    return {
                        str(e.get("reason"))
                        for e in events.get("items", [])
                        if (e.get("involvedObject") or {}).get("uid") == body["metadata"]["uid"]
                    }

                operator.until(
                    "a RuntimeClassUpdated event", lambda: "RuntimeClassUpdated" in reasons()
                )

                # Deleting the profile: it goes at once, and the operator removes its plan
                # entry. Its RuntimeClass is the garbage collector's (by its controller
                # reference), which this emulator does not have: the e2e tests see it go.
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, NAME)
                operator.until("the profile to be gone", lambda: get_profile() is None)
                operator.until(
                    "the plan entry to be gone",
                    lambda: (
                        (p := read_plan(kube, NAMESPACE)) is not None and NAME not in p["handlers"]
                    ),
                )

                # No crash, no failed reads or writes, no 5xx or dropped connections on the way.
                operator.alive()
                log = operator.log_text()
                for trouble in ("Traceback", "reconcile: ", "retrying "):
                    assert trouble not in log, operator.log_excerpt()
        finally:
            kube.close()
