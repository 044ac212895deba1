"""Run the real operator against a cluster: CRD install, a namespace, the process itself."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "runtime.wcow.dev_windowsruntimeprofiles.yaml"
GROUP, VERSION, PLURAL = "runtime.wcow.dev", "v1alpha1", "windowsruntimeprofiles"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 90) -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as error:
            last = error
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r:.300})")


def refused(
    what: str,
    call: Callable[[], Any],
    expect: str,
    *,
    timeout: float = 0,
    undo: Callable[[], Any] | None = None,
) -> None:
    """``call`` is refused (403) with ``expect`` in the message. A policy applies a moment
    after it is created: with ``timeout``, retry until the server refuses, undoing any change
    that slipped through before."""
    deadline = time.monotonic() + timeout
    while True:
        refusal: ApiException | None = None
        try:
            call()
        except ApiException as error:
            refusal = error
        if refusal is not None:
            break
        if undo is not None:
            undo()
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: allowed, but should be refused with {expect!r}")
        time.sleep(1)
    assert refusal.status == 403, f"{what}: {refusal.status} {refusal.body}"
    assert expect in str(refusal.body), f"{what}: {refusal.body}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def installed_crd(
    api_client: client.ApiClient, crd: dict[str, Any] | None = None
) -> Iterator[None]:
    """The CRD from crds/ (or ``crd``), created (and removed afterwards, waiting until it is
    gone) or updated in place. A CRD still terminating from an earlier run is waited out first."""
    extensions = client.ApiextensionsV1Api(api_client)
    body = copy.deepcopy(crd) if crd else yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    name = body["metadata"]["name"]

    def current() -> Any:
        try:
            return extensions.read_custom_resource_definition(name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    wait_for(
        f"CRD {name} to finish terminating",
        lambda: (crd := current()) is None or crd.metadata.deletion_timestamp is None,
        timeout=120,
    )
    existing = current()
    created = existing is None
    if created:
        extensions.create_custom_resource_definition(body)
    else:
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version
        extensions.replace_custom_resource_definition(name, body)

    def established() -> bool:
        crd = current()
        return crd is not None and any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for("the CRD to be established", established)
    try:
        yield
    finally:
        if created:
            extensions.delete_custom_resource_definition(name)
            wait_for(f"CRD {name} to be deleted", lambda: current() is None, timeout=120)


@contextlib.contextmanager
def profiles_cleaned_up(api_client: client.ApiClient, names: list[str]) -> Iterator[None]:
    """Whatever happens in the block, delete these profiles while the operator still runs;
    if they do not go within a minute, strip the finalizer so nothing is left stuck."""
    custom = client.CustomObjectsApi(api_client)
    try:
        yield
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        deadline = time.monotonic() + 60
        for name in names:
            while time.monotonic() < deadline and _exists(custom, name):
                time.sleep(0.5)
            if _exists(custom, name):
                with contextlib.suppress(ApiException):
                    custom.patch_cluster_custom_object(
                        GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
                    )


def _exists(custom: client.CustomObjectsApi, name: str) -> bool:
    try:
        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@contextlib.contextmanager
def namespace(api_client: client.ApiClient, name: str) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def operator_command(ns: str, metrics: int, health: int, *extra: str) -> list[str]:
    """``wcow-operator`` without leader election, on the given ports, logging as text."""
    return [
        sys.executable,
        "-m",
        "wcow_operator.main",
        "--namespace",
        ns,
        "--no-leader-election",
        "--metrics-port",
        str(metrics),
        "--health-port",
        str(health),
        "--log-format",
        "text",
        *extra,
    ]


@contextlib.contextmanager
def running_operator(ns: str, *extra: str, ready: bool = True) -> Iterator[dict[str, Any]]:
    """``wcow-operator`` as a subprocess with the test's kubeconfig; yielded once /readyz
    answers 200 (``ready=False``: once /healthz does, for tests of readiness itself)."""
    metrics, health = free_port(), free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"wcow-operator-{ns}.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            operator_command(ns, metrics, health, *extra),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        info = {"process": process, "metrics": metrics, "health": health, "log": log}
        probe = "readyz" if ready else "healthz"
        try:
            wait_for(
                f"the operator to be ready (log: {log})",
                lambda: process.poll() is None and _ok(f"http://127.0.0.1:{health}/{probe}"),
                timeout=60,
            )
            yield info
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _ok(url: str) -> bool:
    return http_status(url) == 200


def http_status(url: str) -> int:
    """The HTTP status of a GET (0: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def windows_pod(
    name: str, runtime_class: str | None, **resources: dict[str, str]
) -> dict[str, Any]:
    """A one-container Windows pod, with ``resources`` (limits=..., requests=...) if given."""
    container: dict[str, Any] = {"name": "app", "image": "mcr.microsoft.com/windows/nanoserver"}
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container], "automountServiceAccountToken": False}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def metric(port: int, name: str) -> float:
    """Sum of all samples of a metric on the operator's /metrics."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def profile(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WindowsRuntimeProfile",
        "metadata": {"name": name},
        "spec": spec,
    }


def condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for entry in (body.get("status") or {}).get("conditions") or []:
        if entry.get("type") == type_:
            return dict(entry)
    return None


def read_plan(api_client: client.ApiClient, ns: str) -> dict[str, Any] | None:
    try:
        config_map = client.CoreV1Api(api_client).read_namespaced_config_map(
            "wcow-runtime-plan", ns
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(json.loads((config_map.data or {})["plan.json"]))


def apiserver_requests(api_client: client.ApiClient) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource), from the server's /metrics."""
    method, url, headers, _, _ = api_client.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, header_params=headers)
    text = response.read().decode()  # type: ignore[no-untyped-call]
    totals: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, value = line[len("apiserver_request_total{") :].rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in labels_text.split(",") if "=" in part)
        key = (labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"'))
        totals[key] += int(float(value))
    return totals


def table_cells(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The row ``kubectl get wrp NAME`` prints: the server renders the printer columns."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}",
        query_params=[("includeObject", "None")],
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers)
    response.read()
    table = json.loads(response.data)
    columns = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(columns, table["rows"][0]["cells"], strict=True))
