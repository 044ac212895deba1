"""The Kubernetes adapter: the calls it makes, that RBAC allows each of them, and that only
it imports the client."""

from __future__ import annotations

import ast
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from wcow_agent.loop.cluster import ClusterError, NodeObject, WatchExpiredError
from wcow_agent.loop.cluster_view import ClusterView, RunOptions
from wcow_agent.loop.kubernetes_cluster import KubernetesCluster
from wcow_agent.loop.metrics import Metrics
from wcow_operator.rbac import AGENT_CLUSTER_RULES, AGENT_NAMESPACE_RULES, allows

AGENT = Path(__file__).resolve().parents[2] / "node-agent" / "wcow_agent"


class FakeCore:
    """CoreV1Api as far as the adapter uses it; records (verb, resource, namespace, ...)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, dict[str, Any]]] = []
        self.config_map: client.V1ConfigMap | None = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="wcow-runtime-plan", resource_version="41"),
            data={"plan.json": '{"kind": "RuntimePlan"}'},
        )
        self.fail: ApiException | None = None

    def _record(self, verb: str, resource: str, namespace: str | None, **details: Any) -> None:
        self.calls.append((verb, resource, namespace, details))
        if self.fail is not None:
            raise self.fail

    def read_namespaced_config_map(self, name: str, namespace: str) -> client.V1ConfigMap:
        self._record("get", "configmaps", namespace, name=name)
        if self.config_map is None:
            raise ApiException(status=404, reason="Not Found")
        return self.config_map

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> None:
        raise AssertionError("only called through the watch")

    def read_node(self, name: str, _preload_content: bool = True) -> RawAnswer:
        self._record("get", "nodes", None, name=name)
        assert not _preload_content  # the agent reads the Node as JSON, not as a V1Node
        node = {
            "metadata": {
                "name": name,
                "uid": "uid-7",
                "labels": {"a": "b"},
                "annotations": {"c": "d"},
            },
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        }
        return RawAnswer(json.dumps(node).encode())

    def patch_node(
        self, name: str, body: Any, _preload_content: bool = True, **kwargs: Any
    ) -> RawAnswer | None:
        self._record("patch", "nodes", None, name=name, body=body, **kwargs)
        return RawAnswer(b"{}") if not _preload_content else None

    def create_namespaced_event(self, namespace: str, body: client.CoreV1Event) -> None:
        self._record("create", "events", namespace, body=body)


class RawAnswer:
    """An answer asked for with ``_preload_content=False`` (urllib3's response)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class FakeWatch:
    def __init__(self, core: FakeCore, events: list[dict[str, Any]]) -> None:
        self.core = core
        self.events = events
        self.stopped = False

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        assert func == self.core.list_namespaced_config_map
        self.core.calls.append(("watch", "configmaps", args[0], kwargs))
        yield from self.events

    def stop(self) -> None:
        self.stopped = True


def config_map(version: str, text: str | None) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="wcow-runtime-plan", resource_version=version),
        data=None if text is None else {"plan.json": text},
    )


def assert_rbac_allows(calls: list[tuple[str, str, str | None, dict[str, Any]]]) -> None:
    for verb, resource, namespace, _ in calls:
        rules = AGENT_NAMESPACE_RULES if resource == "configmaps" else AGENT_CLUSTER_RULES
        name = "wcow-runtime-plan" if resource == "configmaps" else None
        assert allows(rules, "", resource, verb, name), f"RBAC does not allow {verb} {resource}"
        if resource == "configmaps":
            assert namespace == "wcow-system", "configmaps only in the plan's namespace"


def test_plan_reads_and_watches_are_allowed_and_narrow() -> None:
    core = FakeCore()
    events = [
        {"type": "MODIFIED", "object": config_map("42", '{"v": 2}')},
        {"type": "DELETED", "object": config_map("43", '{"v": 2}')},
    ]
    watch = FakeWatch(core, events)
    cluster = KubernetesCluster(core, watch_factory=lambda: watch)

    plan = cluster.get_plan("wcow-system")
    seen = list(cluster.watch_plan("wcow-system", plan.resource_version, 300))

    assert (plan.exists, plan.text, plan.resource_version) == (
        True,
        '{"kind": "RuntimePlan"}',
        "41",
    )
    assert [(p.exists, p.text, p.resource_version) for p in seen] == [
        (True, '{"v": 2}', "42"),
        (False, None, "43"),
    ]
    _, _, _, kwargs = core.calls[-1]
    assert kwargs == {
        "field_selector": "metadata.name=wcow-runtime-plan",
        "timeout_seconds": 300,
        "resource_version": "41",
    }
    assert watch.stopped
    assert_rbac_allows(core.calls)


def test_rollout_reads_and_watches_are_allowed_and_the_paced_mark_is_read() -> None:
    core = FakeCore()
    core.config_map = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="wcow-runtime-rollout", resource_version="7"),
        data={"rollout.json": '{"planHash": "sha256:x"}'},
    )
    paced = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(
            name="wcow-runtime-plan",
            resource_version="8",
            annotations={"runtime.wcow.dev/rollout": "paced"},
        ),
        data={"plan.json": "{}"},
    )
    rollout_events = [{"type": "DELETED", "object": core.config_map}]
    watches = iter(
        [FakeWatch(core, rollout_events), FakeWatch(core, [{"type": "ADDED", "object": paced}])]
    )
    cluster = KubernetesCluster(core, watch_factory=lambda: next(watches))

    rollout = cluster.get_rollout("wcow-system")
    assert (rollout.exists, rollout.text, rollout.resource_version) == (
        True,
        '{"planHash": "sha256:x"}',
        "7",
    )
    gone = list(cluster.watch_rollout("wcow-system", "7", 300))
    assert [(r.exists, r.text) for r in gone] == [(False, None)]
    assert core.calls[-1][3]["field_selector"] == "metadata.name=wcow-runtime-rollout"
    (plan,) = cluster.watch_plan("wcow-system", None, 300)
    assert plan.paced
    assert not cluster.get_plan("wcow-system").paced  # the rollout ConfigMap has no mark
    for verb, resource, namespace, _ in core.calls:
        assert allows(AGENT_NAMESPACE_RULES, "", resource, verb, "wcow-runtime-rollout")
        assert namespace == "wcow-system"


def test_a_missing_plan_is_not_an_error_but_a_refusal_is() -> None:
    core = FakeCore()
    core.config_map = None
    cluster = KubernetesCluster(core)
    assert cluster.get_plan("wcow-system").exists is False
    core.fail = ApiException(status=403, reason="Forbidden")
    with pytest.raises(ClusterError, match="403 Forbidden") as raised:
        cluster.get_plan("wcow-system")
    assert raised.value.status == 403


def test_an_expired_watch_asks_for_a_new_list() -> None:
    core = FakeCore()
    expired = {"type": "ERROR", "raw_object": {"code": 410, "message": "too old resource version"}}
    cluster = KubernetesCluster(core, watch_factory=lambda: FakeWatch(core, [expired]))
    with pytest.raises(WatchExpiredError, match="too old"):
        list(cluster.watch_plan("wcow-system", "1", 10))


class BrokenWatch(FakeWatch):
    """A watch whose connection drops after its events (the server restarted, a proxy cut
    it, or ``close()`` shut the socket down)."""

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from super().stream(func, *args, **kwargs)
        raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")


def test_a_dropped_watch_connection_is_a_cluster_error_not_a_crash() -> None:
    """The runner lists again after a ClusterError; any other exception would end the plan
    watch thread and the agent would never see a new plan."""
    core = FakeCore()
    cluster = KubernetesCluster(core, watch_factory=lambda: BrokenWatch(core, []))
    with pytest.raises(ClusterError, match="Connection broken"):
        list(cluster.watch_plan("wcow-system", "1", 10))


def test_close_stops_open_watches_and_ends_them_quietly() -> None:
    core = FakeCore()
    core.api_client = client.ApiClient()  # type: ignore[attr-defined]
    watch = BrokenWatch(core, [{"type": "MODIFIED", "object": config_map("42", "{}")}])
    cluster = KubernetesCluster(core, watch_factory=lambda: watch)
    stream = cluster.watch_plan("wcow-system", "1", 10)
    assert next(stream).resource_version == "42"
    cluster.close()
    assert watch.stopped
    assert list(stream) == []  # the broken connection after close() ends the watch
    assert list(cluster.watch_plan("wcow-system", "1", 10)) == []  # no new watch once closed


def test_node_patch_is_a_merge_of_labels_and_annotations_by_the_agent() -> None:
    core = FakeCore()
    cluster = KubernetesCluster(core)

    node = cluster.get_node("win-1")
    cluster.patch_node(
        "win-1",
        {"runtime.wcow.dev/hv": "ready", "runtime.wcow.dev/old": None},
        {"runtime.wcow.dev/agent-status": "{}"},
    )
    cluster.patch_node("win-1", {}, {})  # nothing to change: no request

    assert node == NodeObject(
        "win-1", "uid-7", {"a": "b"}, {"c": "d"}, ({"key": "k", "effect": "NoSchedule"},)
    )
    patches = [call for call in core.calls if call[0] == "patch"]
    assert len(patches) == 1
    assert patches[0][3] == {
        "name": "win-1",
        "body": {
            "metadata": {
                "labels": {"runtime.wcow.dev/hv": "ready", "runtime.wcow.dev/old": None},
                "annotations": {"runtime.wcow.dev/agent-status": "{}"},
            }
        },
        "field_manager": "wcow-agent",
    }
    assert_rbac_allows(core.calls)


def test_events_are_recorded_on_the_node() -> None:
    core = FakeCore()
    cluster = KubernetesCluster(core)
    cluster.node_event(NodeObject("win-1", "uid-7"), "ContainerdRollback", "why", warning=True)
    verb, resource, namespace, details = core.calls[0]
    event: client.CoreV1Event = details["body"]
    assert (verb, resource, namespace) == ("create", "events", "default")
    assert event.involved_object.kind == "Node"
    assert event.involved_object.name == "win-1"
    assert event.involved_object.uid == "uid-7"
    assert (event.reason, event.message, event.type) == ("ContainerdRollback", "why", "Warning")
    assert event.source.component == "wcow-agent"
    assert_rbac_allows(core.calls)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_adapter_imports_kubernetes_and_nothing_imports_the_operator() -> None:
    for path in sorted(AGENT.rglob("*.py")):
        imported = _imports(path)
        if path.name != "kubernetes_cluster.py":
            assert not {n for n in imported if n.split(".")[0] == "kubernetes"}, path
        operator = {n for n in imported if n.split(".")[0] == "wcow_operator"}
        assert not operator, f"{path.name} imports {operator}: use wcow_contract"


def test_containerd_1_6_hostprocess_token_is_found_under_the_sandbox_mount(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """On containerd 1.6 a HostProcess pod sees its volumes only under
    CONTAINER_SANDBOX_MOUNT_POINT; the agent must still find its service account."""
    import kubernetes

    from wcow_agent.loop.kubernetes_cluster import SERVICE_ACCOUNT, load_credentials

    account = tmp_path / SERVICE_ACCOUNT
    account.mkdir(parents=True)
    (account / "token").write_text("token-from-the-sandbox")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", _no_default_path)
    environ = {
        "CONTAINER_SANDBOX_MOUNT_POINT": str(tmp_path),
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    load_credentials(environ)
    configuration = kubernetes.client.Configuration.get_default_copy()
    assert configuration.host == "https://10.0.0.1:443"
    assert configuration.api_key["BearerToken"].endswith("token-from-the-sandbox")
    assert configuration.ssl_ca_cert == str(account / "ca.crt")


def _no_default_path() -> None:
    import kubernetes

    raise kubernetes.config.ConfigException("Service token file does not exist.")


def test_no_answer_from_the_api_server_is_a_cluster_error_for_every_call() -> None:
    """While the API server restarts, connections are refused: each call must fail as a
    ClusterError, which the loop and the watch threads retry. A raw urllib3 error ended the
    agents' watch threads on the first restart (tests/faults found it), and they never saw
    a rollout's permission again."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.retries = 0
    cluster = KubernetesCluster(client.CoreV1Api(client.ApiClient(configuration)))
    node = NodeObject(name="n1", uid="u", labels={}, annotations={})
    calls = {
        "get_plan": lambda: cluster.get_plan("wcow-system"),
        "get_rollout": lambda: cluster.get_rollout("wcow-system"),
        "get_node": lambda: cluster.get_node("n1"),
        "patch_node": lambda: cluster.patch_node("n1", {"a": "b"}, {}),
        "node_event": lambda: cluster.node_event(node, "Applied", "m", False),
        "register_node": lambda: cluster.register_node("n1", {}, {}, []),
        "delete_node": lambda: cluster.delete_node("n1"),
    }
    for call in calls.values():
        with pytest.raises(ClusterError, match="Connection refused"):
            call()


class StreamedResponse:
    """What ``list_namespaced_config_map(watch=True, _preload_content=False)`` answers: the
    watch's lines, as the API server sends them."""

    status = 200

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = b"".join(json.dumps(event).encode() + b"\n" for event in events)

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class StreamingCore(FakeCore):
    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__()
        self.events = events

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> Any:  # type: ignore[override]
        """list_namespaced_config_map  # noqa: E501

        :return: V1ConfigMapList
        """
        self.calls.append(("watch", "configmaps", namespace, kwargs))
        return StreamedResponse(self.events)


def plan_config_map_json(version: str, text: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "wcow-runtime-plan",
            "namespace": "wcow-system",
            "resourceVersion": version,
            "annotations": annotations,
        },
        "data": {"plan.json": text},
    }


def test_the_default_watch_reads_the_json_of_each_change_through_the_clients_stream() -> None:
    """The agent's own watch (``JsonWatch``, the client's ``Watch.stream`` without its typed
    model): the plan, its pacing and its announced hash come through as from a read."""
    annotations = {
        "runtime.wcow.dev/rollout": "paced",
        "runtime.wcow.dev/plan-hash": "sha256:abc",
    }
    events = [
        {"type": "ADDED", "object": plan_config_map_json("5", '{"a": 1}', **annotations)},
        {"type": "DELETED", "object": plan_config_map_json("6", '{"a": 1}')},
    ]
    cluster = KubernetesCluster(StreamingCore(events))  # type: ignore[arg-type]
    seen = list(cluster.watch_plan("wcow-system", "4", 30))
    assert [(p.exists, p.text, p.resource_version) for p in seen] == [
        (True, '{"a": 1}', "5"),
        (False, None, "6"),
    ]
    assert seen[0].paced
    assert seen[0].announced_hash == "sha256:abc"


class RelistCountingCore(StreamingCore):
    """Stops the view's watch thread once it has read the ConfigMap ``reads`` times (its
    watch after that read is its last)."""

    def __init__(self, events: list[dict[str, Any]], stop: threading.Event, reads: int) -> None:
        super().__init__(events)
        self.stop, self.reads = stop, reads

    def read_namespaced_config_map(self, name: str, namespace: str) -> client.V1ConfigMap:
        found = super().read_namespaced_config_map(name, namespace)
        if sum(1 for call in self.calls if call[0] == "get") >= self.reads:
            self.stop.set()
        return found


def test_the_default_watch_turns_410_into_a_relist_not_a_crash() -> None:
    expired = {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }
    cluster = KubernetesCluster(StreamingCore([expired]))  # type: ignore[arg-type]
    with pytest.raises(WatchExpiredError):
        list(cluster.watch_rollout("wcow-system", "4", 30))
    # The agent's watch thread lists again after the 410, and watches from the new list's
    # version; an expired watch is no error (no backoff, not counted).
    stop = threading.Event()
    core = RelistCountingCore([expired], stop, reads=2)
    metrics = Metrics()
    view = ClusterView(
        KubernetesCluster(core),  # type: ignore[arg-type]
        RunOptions(node_name="n1"),
        metrics,
        stop,
        threading.Event(),
    )
    view.watch_rollout_forever()
    assert [(verb, details.get("resource_version")) for verb, _, _, details in core.calls] == [
        ("get", None),
        ("watch", "41"),  # from the version the list returned
        ("get", None),  # the relist after the 410
        ("watch", "41"),  # and a new watch from the relist's version
    ]
    assert metrics.registry.get_sample_value("wcow_agent_cluster_errors_total") == 0
