"""Least privilege on a real API server: the chart's CRD and RBAC, the operator running under its
own ServiceAccount token (not cluster-admin), and the agent's ServiceAccount held to its own
Node and runtime.wcow.dev/* keys by the admission policy.

Runs when KUBECONFIG points at a cluster (see conftest.py); needs cluster-admin to set up
(including impersonation). Everything is created under a unique prefix (release and namespace)
and removed afterwards; the CRD only if this test created it. Two Node objects are created
for the node tests (no kubelet behind them) and deleted again.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import helm_python
import pytest
import yaml
from deploy.generate import CHART, render_chart
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from tests.conftest import profile_document
from tests.e2e.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    profile,
    read_plan,
    refused,
    running_operator,
    wait_for,
)
from wcow_agent.loop.cluster import ClusterError
from wcow_agent.loop.kubernetes_cluster import KubernetesCluster
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.errors import parse_profile
from wcow_contract.labels import (
    CONTAINERD_LINE_LABEL,
    HYPERV_LABEL,
    NODE_LABEL_PREFIX,
    READY_LABEL_PREFIX,
    STARTUP_TAINT,
    guest_build_label,
)
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator import rbac
from wcow_operator.reconcile.drain import CORDONED_BY, CORDONED_BY_VALUE
from wcow_operator.render.runtimeclass import render_runtime_class

pytestmark = pytest.mark.e2e

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
CRD_NAME = f"{PLURAL}.{GROUP}"
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# From the chart: identities, permissions, the guard; the workloads need images, not tested here.
INSTALLED_KINDS = {
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    *POLICY_KINDS,
}


@dataclass
class Install:
    release: str
    namespace: str
    admin: client.ApiClient
    policy: bool
    objects: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def operator_sa(self) -> str:
        return f"{self.release}-wcow-runtime-operator"

    @property
    def agent_sa(self) -> str:
        return f"{self.release}-wcow-runtime-agent"

    @property
    def agent_user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.agent_sa}"


def _server_supports_policy(admin: client.ApiClient) -> bool:
    """Admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (GA in 1.30) is served, and
    the server is 1.30+ (bound tokens carry the node name from 1.30 on by default)."""
    version = client.VersionApi(admin).get_code()
    minor = int("".join(ch for ch in version.minor if ch.isdigit()) or 0)
    if (int(version.major), minor) < (1, 30):
        return False
    try:
        resources = client.AdmissionregistrationV1Api(admin).get_api_resources()
    except ApiException:
        return False
    return any(r.name == "validatingadmissionpolicies" for r in resources.resources)


def _wait_established(admin: client.ApiClient, name: str) -> None:
    extensions = client.ApiextensionsV1Api(admin)

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(name)
        return any(
            c.type == "Established" and c.status == "True"
            for c in (crd.status.conditions if crd.status else None) or []
        )

    wait_for("the CRD to be established", established)


def _crd_exists(admin: client.ApiClient) -> bool:
    try:
        client.ApiextensionsV1Api(admin).read_custom_resource_definition(CRD_NAME)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="module")
def install(kube: client.ApiClient, kubeconfig: Path) -> Iterator[Install]:
    """`helm install` of the chart (real Helm, through its Go SDK) into a namespace of its
    own, as the admin; `helm uninstall` afterwards. A CRD someone installed already stays
    theirs: the release then leaves it out (crds.enabled=false) and never removes it."""
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    setup = Install(release, release, kube, _server_supports_policy(kube))
    own_crd = not _crd_exists(kube)
    values = {
        "admissionPolicy": {"enabled": setup.policy},
        "crds": {"enabled": own_crd, "keep": False},
        # No kubelet runs the uninstall hook's Job here: tests/e2e/test_uninstall.py does.
        "uninstall": {"enabled": False},
    }
    core = client.CoreV1Api(kube)
    core.create_namespace(
        raw(
            {
                "metadata": {
                    "name": release,
                    "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
                }
            }
        )
    )
    helm = helm_python.Config(kubeconfig_path=kubeconfig, namespace=release)
    try:
        installed = helm.install(CHART, release, values, namespace=release, timeout=120)
        setup.objects = [doc for doc in yaml.safe_load_all(installed["manifest"]) if doc]
        setup.values = values
        if own_crd:
            _wait_established(kube, CRD_NAME)
        yield setup
    finally:
        with contextlib.suppress(helm_python.HelmError):
            helm.uninstall(release, ignore_not_found=True, timeout=120)
        helm.close()
        with contextlib.suppress(ApiException):
            core.delete_namespace(release)
        if own_crd:
            wait_for("the release's CRD to be deleted", lambda: not _crd_exists(kube), 120)


# ---- identities ----


def _admin_configuration() -> client.Configuration:
    configuration: client.Configuration = client.Configuration.get_default_copy()
    return configuration


def service_account_token(install: Install, name: str, seconds: int = 3600) -> str:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
    )
    response = client.CoreV1Api(install.admin).create_namespaced_service_account_token(
        name, install.namespace, request
    )
    assert response.status is not None
    return str(response.status.token)


def token_client(token: str) -> client.ApiClient:
    """An API client that authenticates with ``token`` only (no admin certificate)."""
    configuration = _admin_configuration()
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    configuration.api_key_prefix = {}
    configuration.refresh_api_key_hook = None
    configuration.cert_file = None
    configuration.key_file = None
    configuration.username = None
    configuration.password = None
    return client.ApiClient(configuration)


def token_kubeconfig(token: str, namespace: str, path: Path) -> Path:
    configuration = _admin_configuration()
    cluster: dict[str, Any] = {"server": configuration.host}
    if configuration.ssl_ca_cert:
        ca = Path(configuration.ssl_ca_cert).read_bytes()
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    if not configuration.verify_ssl:
        cluster["insecure-skip-tls-verify"] = True
    if configuration.tls_server_name:
        cluster["tls-server-name"] = configuration.tls_server_name
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [
            {"name": "sa", "context": {"cluster": "e2e", "user": "sa", "namespace": namespace}}
        ],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def impersonating(user: str, node: str | None = None) -> client.ApiClient:
    """The admin acting as ``user`` (the API server adds the ServiceAccount's groups), with the
    node name a pod-bound token of that ServiceAccount would carry."""
    api = client.ApiClient(_admin_configuration())
    api.default_headers["Impersonate-User"] = user
    if node is not None:
        # Extra keys travel percent-encoded in the header name ("/" is not allowed there).
        api.default_headers["Impersonate-Extra-authentication.kubernetes.io%2fnode-name"] = node
    return api


def can(
    api: client.ApiClient,
    verb: str,
    group: str,
    resource: str,
    namespace: str | None,
    name: str | None = None,
) -> bool:
    subresource = ""
    if "/" in resource:
        resource, subresource = resource.split("/", 1)
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group=group,
                resource=resource,
                subresource=subresource or None,
                verb=verb,
                namespace=namespace,
                name=name,
            )
        )
    )
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status and result.status.allowed)


def _each_permission(rules: list[rbac.Rule]) -> Iterator[tuple[str, str, str, str | None]]:
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        yield verb, group, resource, name


def managed_runtime_class(name: str, uid: str = "0f0e0d0c-uid") -> dict[str, Any]:
    """A RuntimeClass as reconcile renders it for profile ``name`` (uid: the profile's)."""
    document = profile_document(name)
    document["metadata"]["uid"] = uid
    return render_runtime_class(parse_profile(document))


def raw(body: dict[str, Any]) -> Any:
    """The client's signatures name model classes; it sends plain dicts as they are."""
    return body


def _status(call: Callable[[], Any]) -> int:
    try:
        call()
    except ApiException as error:
        return int(error.status)
    return 200


# ---- the operator ----


def test_operator_token_has_exactly_its_permissions(install: Install) -> None:
    operator = token_client(service_account_token(install, install.operator_sa))
    for verb, group, resource, name in _each_permission(rbac.OPERATOR_CLUSTER_RULES):
        assert can(operator, verb, group, resource, None, name), (verb, group, resource)
    for verb, group, resource, name in _each_permission(rbac.OPERATOR_NAMESPACE_RULES):
        assert can(operator, verb, group, resource, install.namespace, name), (verb, resource)
    for verb, group, resource, namespace in [
        ("get", "", "secrets", install.namespace),
        ("list", "", "secrets", None),
        # nodes patch is the drain's (held to spec.unschedulable and its annotation by the
        # node-cordon policy); pods it may evict, not delete or change
        ("delete", "", "nodes", None),
        ("delete", "", "pods", None),
        ("patch", "", "pods", None),
        ("create", "", "configmaps", "default"),
        ("create", "coordination.k8s.io", "leases", "kube-system"),
        ("delete", GROUP, PLURAL, None),
        ("create", "apps", "deployments", install.namespace),
        ("update", "apiextensions.k8s.io", "customresourcedefinitions", None),
    ]:
        assert not can(operator, verb, group, resource, namespace), (verb, group, resource)


def test_operator_token_makes_its_real_calls(install: Install) -> None:
    operator = token_client(service_account_token(install, install.operator_sa))
    ns = install.namespace
    core, node_api = client.CoreV1Api(operator), client.NodeV1Api(operator)
    client.CustomObjectsApi(operator).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    core.list_node(limit=1)
    node_api.list_runtime_class(limit=1)
    name = f"{install.release}-rc"
    # As reconcile renders it (the runtimeclass guard refuses any other; tests/e2e/test_guards.py).
    node_api.create_runtime_class(raw(managed_runtime_class(name)))
    # Its owner (a profile uid that does not exist) makes kube-controller-manager's garbage
    # collector delete it too, possibly first: 404 then still means the delete was authorized
    # (the API server authorizes before it looks the object up); 403 fails.
    assert _status(lambda: node_api.delete_runtime_class(name)) in (200, 404)
    core.create_namespaced_config_map(
        ns, raw({"metadata": {"name": "wcow-runtime-plan"}, "data": {}})
    )
    # Read as the operator's watch does: selected by name (RBAC resourceNames).
    (plan,) = core.list_namespaced_config_map(
        ns, field_selector="metadata.name=wcow-runtime-plan"
    ).items
    plan.data = {"plan.json": "{}"}
    core.replace_namespaced_config_map("wcow-runtime-plan", ns, plan)
    client.CoordinationV1Api(operator).create_namespaced_lease(
        ns,
        raw({"metadata": {"name": f"{install.release}-lease"}, "spec": {"holderIdentity": "e2e"}}),
    )
    # Events as controller.py posts them: about a profile, in default (the events guard
    # refuses others when the policies are on; tests/e2e/test_guards.py).
    core.create_namespaced_event(
        "default",
        raw(
            {
                "metadata": {"generateName": "e2e-"},
                "involvedObject": {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "WindowsRuntimeProfile",
                    "name": f"{install.release}-hv",
                },
                "reason": "E2E",
                "message": "least-privilege check",
                "type": "Normal",
            }
        ),
    )
    assert _status(lambda: core.list_namespaced_secret(ns)) == 403
    assert _status(lambda: core.list_namespaced_config_map(ns)) == 403
    assert (
        _status(
            lambda: core.create_namespaced_config_map("default", raw({"metadata": {"name": name}}))
        )
        == 403
    )


def test_operator_does_its_job_under_its_own_token(
    install: Install, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real wcow-operator, with leader election, as its ServiceAccount: a profile becomes a
    RuntimeClass and a plan entry, and deleting it removes both."""
    token = service_account_token(install, install.operator_sa)
    kubeconfig = token_kubeconfig(token, install.namespace, tmp_path / "operator.kubeconfig")
    custom = client.CustomObjectsApi(install.admin)
    node_api = client.NodeV1Api(install.admin)
    name = f"{install.release}-hv"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    with running_operator(install.namespace, "--leader-election", "--resync-seconds", "10") as op:
        try:
            custom.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, profile(name, isolation="HyperV", windowsBuild="ltsc2022")
            )
            runtime_class = wait_for(
                f"RuntimeClass {name}", lambda: node_api.read_runtime_class(name)
            )
            assert runtime_class.handler == name
            plan = wait_for(
                "the plan entry",
                lambda: (
                    (read_plan(install.admin, install.namespace) or {})
                    .get("handlers", {})
                    .get(name)
                ),
            )
            assert plan
            wait_for(
                "a Valid condition",
                lambda: condition(
                    cast(
                        dict[str, Any],
                        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name),
                    ),
                    "Valid",
                ),
            )
            lease = client.CoordinationV1Api(install.admin).read_namespaced_lease(
                "wcow-operator", install.namespace
            )
            assert lease.spec is not None
            assert lease.spec.holder_identity
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            wait_for(
                f"RuntimeClass {name} to go",
                lambda: _status(lambda: node_api.read_runtime_class(name)) == 404,
            )
            wait_for(
                f"profile {name} to go (finalizer released)",
                lambda: (
                    _status(lambda: custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
                    == 404
                ),
            )
        except AssertionError as error:
            log = Path(op["log"]).read_text(encoding="utf-8")[-4000:]
            raise AssertionError(f"{error}\n--- operator log (tail) ---\n{log}") from None
        finally:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    # A call the RBAC does not allow would show as Forbidden in the operator's log.
    assert "Forbidden" not in Path(op["log"]).read_text(encoding="utf-8")


# ---- the agent ----


@pytest.fixture(scope="module")
def nodes(install: Install) -> Iterator[tuple[str, str]]:
    """Two Windows Node objects with no kubelet behind them: the agent's own and another."""
    core = client.CoreV1Api(install.admin)
    names = (f"{install.release}-win-a", f"{install.release}-win-b")
    for name in names:
        labels = {"kubernetes.io/os": "windows", "e2e.wcow.dev/owner": install.release}
        core.create_node(raw({"metadata": {"name": name, "labels": labels}}))
    try:
        yield names
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_node(name)


def _label(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {key: value}}}


def test_agent_reads_the_plan_and_nothing_secret(install: Install) -> None:
    agent = impersonating(install.agent_user)
    for verb, group, resource, name in _each_permission(rbac.AGENT_CLUSTER_RULES):
        assert can(agent, verb, group, resource, None, name), (verb, group, resource)
    for verb, group, resource, name in _each_permission(rbac.AGENT_NAMESPACE_RULES):
        assert can(agent, verb, group, resource, install.namespace, name), (verb, resource)
    core = client.CoreV1Api(agent)
    # The plan by name only (RBAC resourceNames): the agent's own list/watch is filtered to it.
    core.list_namespaced_config_map(
        install.namespace, field_selector="metadata.name=wcow-runtime-plan"
    )
    assert _status(lambda: core.list_namespaced_config_map(install.namespace)) == 403
    assert _status(lambda: core.list_namespaced_secret(install.namespace)) == 403
    assert _status(core.list_secret_for_all_namespaces) == 403
    assert _status(lambda: core.read_namespaced_secret("anything", install.namespace)) == 403
    assert not can(agent, "delete", "", "nodes", None)
    assert not can(agent, "patch", "", "nodes/status", None)
    assert not can(agent, "create", "", "configmaps", install.namespace)
    # Never write what every node applies: the plan and the rollout are the operator's.
    for name in (PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP):
        for verb in ("update", "patch", "delete"):
            assert not can(agent, verb, "", "configmaps", install.namespace, name), (verb, name)


def test_agent_may_label_and_annotate_its_own_node(
    install: Install, nodes: tuple[str, str]
) -> None:
    own, _ = nodes
    core = client.CoreV1Api(impersonating(install.agent_user, node=own))
    key = f"{READY_LABEL_PREFIX}{install.release}"
    core.patch_node(own, _label(key, "ready"))
    core.patch_node(
        own, {"metadata": {"annotations": {AGENT_STATUS_ANNOTATION: '{"schemaVersion":1}'}}}
    )
    core.patch_node(own, _label(key, None))
    metadata = client.CoreV1Api(install.admin).read_node(own).metadata
    assert metadata is not None
    assert key not in (metadata.labels or {})
    assert AGENT_STATUS_ANNOTATION in (metadata.annotations or {})


def test_policy_holds_the_agent_to_its_own_node_and_keys(
    install: Install, nodes: tuple[str, str]
) -> None:
    if not install.policy:
        pytest.skip("the server has no ValidatingAdmissionPolicy v1 (needs Kubernetes 1.30+)")
    own, other = nodes
    agent = client.CoreV1Api(impersonating(install.agent_user, node=own))
    admin = client.CoreV1Api(install.admin)
    ready = f"{READY_LABEL_PREFIX}{install.release}"
    refused(
        "a foreign label on its own Node",
        lambda: agent.patch_node(own, _label("example.com/pool", "x")),
        f"only {READY_LABEL_PREFIX}* and {NODE_LABEL_PREFIX}* labels, not example.com/pool",
        undo=lambda: admin.patch_node(own, _label("example.com/pool", None)),
        timeout=30,
    )
    refused(
        "a runtime label on another Node",
        lambda: agent.patch_node(other, _label(ready, "ready")),
        "only its own Node",
        undo=lambda: admin.patch_node(other, _label(ready, None)),
        timeout=30,
    )
    refused(
        "a capability label on another Node",
        lambda: agent.patch_node(other, _label(HYPERV_LABEL, "true")),
        "only its own Node",
        undo=lambda: admin.patch_node(other, _label(HYPERV_LABEL, None)),
        timeout=30,
    )
    refused(
        "a node.runtime.wcow.dev/ annotation (labels only)",
        lambda: agent.patch_node(
            own, {"metadata": {"annotations": {f"{NODE_LABEL_PREFIX}note": "x"}}}
        ),
        f"only {READY_LABEL_PREFIX}* annotations",
        undo=lambda: admin.patch_node(
            own, {"metadata": {"annotations": {f"{NODE_LABEL_PREFIX}note": None}}}
        ),
        timeout=30,
    )
    refused(
        "relabelling the OS of its own Node",
        lambda: agent.patch_node(own, _label("kubernetes.io/os", "linux")),
        "labels",
        undo=lambda: admin.patch_node(own, _label("kubernetes.io/os", "windows")),
        timeout=30,
    )
    refused(
        "cordoning its own Node",
        lambda: agent.patch_node(own, {"spec": {"unschedulable": True}}),
        "the rest of its spec",
        undo=lambda: admin.patch_node(own, {"spec": {"unschedulable": None}}),
        timeout=30,
    )
    # Still allowed: its own keys on its own Node, ready, capability and guest-build labels.
    agent.patch_node(own, _label(ready, "ready"))
    agent.patch_node(own, _label(ready, None))
    found = {
        HYPERV_LABEL: "true",
        CONTAINERD_LINE_LABEL: "2.1",
        guest_build_label(parse_windows_build("ltsc2022")): "true",
    }
    agent.patch_node(own, {"metadata": {"labels": found}})
    labels = admin.read_node(own).metadata.labels
    assert {k: labels.get(k) for k in found} == found
    agent.patch_node(own, {"metadata": {"labels": dict.fromkeys(found)}})
    refused(
        "the operator's cordon annotation on its own Node",
        lambda: agent.patch_node(own, _annotation(CORDONED_BY, CORDONED_BY_VALUE)),
        f"the annotation {CORDONED_BY} is the wcow operator's",
        undo=lambda: admin.patch_node(own, _annotation(CORDONED_BY, None)),
        timeout=30,
    )


def _annotation(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


def test_the_operator_may_cordon_and_uncordon_a_node_and_nothing_else(
    install: Install, nodes: tuple[str, str]
) -> None:
    """The drain before a restart: a token of the operator's ServiceAccount may set
    spec.unschedulable and its own annotation (as ``controller.drainer`` does), nothing else
    of a Node."""
    if not install.policy:
        pytest.skip("the server has no ValidatingAdmissionPolicy v1 (needs Kubernetes 1.30+)")
    own, _ = nodes
    operator = client.CoreV1Api(token_client(service_account_token(install, install.operator_sa)))
    admin = client.CoreV1Api(install.admin)
    cordon = {**_annotation(CORDONED_BY, CORDONED_BY_VALUE), "spec": {"unschedulable": True}}
    for what, patch, undo, expect in (
        ("a label", _label("example.com/pool", "x"), _label("example.com/pool", None), "labels"),
        (
            "another annotation",
            _annotation(AGENT_STATUS_ANNOTATION, "{}"),
            _annotation(AGENT_STATUS_ANNOTATION, None),
            f"only the annotation {CORDONED_BY}",
        ),
        (
            "a taint",
            {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
            {"spec": {"taints": None}},
            "only unschedulable",
        ),
    ):
        refused(
            f"the operator setting {what} on a Node",
            lambda patch=patch: operator.patch_node(own, patch),
            expect,
            undo=lambda undo=undo: admin.patch_node(own, undo),
            timeout=30,
        )
    operator.patch_node(own, cordon)
    body = admin.read_node(own)
    assert body.spec.unschedulable is True
    assert (body.metadata.annotations or {}).get(CORDONED_BY) == CORDONED_BY_VALUE
    operator.patch_node(own, {**_annotation(CORDONED_BY, None), "spec": {"unschedulable": None}})
    body = admin.read_node(own)
    assert not body.spec.unschedulable
    assert CORDONED_BY not in (body.metadata.annotations or {})


def _set_taints(taints: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/spec/taints", "value": taints}]


def test_the_agent_removes_its_startup_taint_and_no_other(
    install: Install, nodes: tuple[str, str]
) -> None:
    """The agent's own call (``KubernetesCluster.replace_taints``, a JSON patch with a test)
    under its identity: the startup taint goes from its own Node; another taint, or the
    startup taint of another Node, stays."""
    own, other = nodes
    admin = client.CoreV1Api(install.admin)
    startup = {"key": STARTUP_TAINT, "value": "pending", "effect": "NoSchedule"}
    pool = {"key": "example.com/pool", "value": "win", "effect": "NoSchedule"}
    for name in (own, other):
        admin.patch_node(name, {"spec": {"taints": [pool, startup]}})
    agent = KubernetesCluster(client.CoreV1Api(impersonating(install.agent_user, node=own)))
    node = agent.get_node(own)
    assert [t["key"] for t in node.taints] == [pool["key"], STARTUP_TAINT]
    agent.replace_taints(own, node.taints, [pool])
    spec = admin.read_node(own).spec
    assert [t.key for t in (spec.taints if spec else None) or []] == [pool["key"]]
    with pytest.raises(ClusterError) as stale:  # the taints changed since it read them
        agent.replace_taints(own, node.taints, [pool])
    assert stale.value.status == 422
    if install.policy:
        theirs = agent.get_node(other).taints  # reading another Node is allowed
        refused(
            "removing another taint of its own Node",
            lambda: agent.core.patch_node(
                own, [{"op": "replace", "path": "/spec/taints", "value": []}]
            ),
            "remove its startup taint",
            undo=lambda: admin.patch_node(own, {"spec": {"taints": [pool]}}),
            timeout=30,
        )
        refused(
            "removing the startup taint of another Node",
            lambda: agent.core.patch_node(
                other, [{"op": "replace", "path": "/spec/taints", "value": [pool]}]
            ),
            "only its own Node",
            undo=lambda: admin.patch_node(other, {"spec": {"taints": list(theirs)}}),
            timeout=30,
        )


def test_pod_bound_tokens_carry_the_node_the_policy_checks(
    install: Install, nodes: tuple[str, str]
) -> None:
    """Not impersonation: a token bound to a pod on the agent's node, as the kubelet would mount
    it, names that node (Kubernetes 1.30+), and the policy lets it patch only that node."""
    if not install.policy:
        pytest.skip("the server has no ValidatingAdmissionPolicy v1 (needs Kubernetes 1.30+)")
    own, other = nodes
    core = client.CoreV1Api(install.admin)
    pod_name = f"{install.release}-agent"
    pod = core.create_namespaced_pod(
        install.namespace,
        raw(
            {
                "metadata": {"name": pod_name},
                "spec": {
                    "serviceAccountName": install.agent_sa,
                    "nodeName": own,  # bound to the node object; no kubelet will run it
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
                },
            }
        ),
    )
    assert pod.metadata is not None
    try:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=600,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod_name, uid=pod.metadata.uid
                ),
            )
        )
        issued = core.create_namespaced_service_account_token(
            install.agent_sa, install.namespace, request
        )
        assert issued.status is not None
        token = str(issued.status.token)
        review = client.AuthenticationV1Api(install.admin).create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        )
        assert review.status is not None
        assert review.status.authenticated, review.status.error
        assert review.status.user is not None
        assert (review.status.user.extra or {}).get(NODE_NAME_EXTRA) == [own], (
            "bound tokens carry no node name: is ServiceAccountTokenPodNodeInfo on (1.30+)?"
        )
        agent = client.CoreV1Api(token_client(token))
        ready = f"{READY_LABEL_PREFIX}{install.release}"
        agent.patch_node(own, _label(ready, "ready"))
        agent.patch_node(own, _label(ready, None))
        refused(
            "a pod-bound token on another Node",
            lambda: agent.patch_node(other, _label(ready, "ready")),
            "only its own Node",
            undo=lambda: client.CoreV1Api(install.admin).patch_node(other, _label(ready, None)),
            timeout=30,
        )
        # What the agent found (its capability and guest-build labels): its own Node only.
        guest = guest_build_label(parse_windows_build("ltsc2019"))
        found = {HYPERV_LABEL: "false", CONTAINERD_LINE_LABEL: "1.7", guest: "true"}
        agent.patch_node(own, {"metadata": {"labels": found}})
        agent.patch_node(own, {"metadata": {"labels": dict.fromkeys(found)}})
        refused(
            "a pod-bound token labelling another Node's guest build",
            lambda: agent.patch_node(other, _label(guest, "true")),
            "only its own Node",
            undo=lambda: client.CoreV1Api(install.admin).patch_node(other, _label(guest, None)),
            timeout=30,
        )
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod_name, install.namespace, grace_period_seconds=0)


def test_install_used_the_chart_objects(install: Install) -> None:
    """Helm installed exactly the chart's rendering, and every object is on the server as
    rendered (the chart's RBAC is the RBAC-as-code of wcow_operator.rbac)."""
    rendered = [
        doc
        for docs in render_chart(
            install.values, release=install.release, namespace=install.namespace
        ).values()
        for doc in docs
    ]

    def key(doc: dict[str, Any]) -> tuple[str, str, str]:
        return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])

    assert sorted(map(key, install.objects)) == sorted(map(key, rendered))
    expected = INSTALLED_KINDS - (set() if install.policy else POLICY_KINDS)
    assert expected <= {o["kind"] for o in install.objects} | {"CustomResourceDefinition"}
    dyn = dynamic.DynamicClient(install.admin)  # type: ignore[no-untyped-call]
    for obj in install.objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        live = resource.get(
            name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
        )
        assert live.metadata.labels["app.kubernetes.io/instance"] == install.release, key(obj)
    roles = {
        o["metadata"]["name"]: o["rules"] for o in install.objects if o["kind"] == "ClusterRole"
    }
    assert roles[f"{install.release}-wcow-runtime-operator"] == copy.deepcopy(
        rbac.OPERATOR_CLUSTER_RULES
    )
