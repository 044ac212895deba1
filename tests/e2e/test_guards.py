"""The chart's guards against a stolen operator token, on the real API server (its webhook
configurations, the plan, its RuntimeClasses, and profiles, which the operator may patch only
for its finalizer): the
chart installed with real Helm (its policies on), then requests made with a TokenRequest token
of the operator's ServiceAccount, as a thief would make them. Each attack is refused with the
policy's message; the operator's own writes, as its code renders them, pass. The garbage
collector and the namespace controller are not held back.

Attacks that would be dangerous if they passed (a webhook configuration that sees every pod)
are sent as server-side dry runs: admission runs for them all the same.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.operator_harness import GROUP, PLURAL, VERSION, profile, refused, wait_for
from tests.e2e.test_delivery import (  # noqa: F401 - install is a fixture
    Install,
    impersonating,
    install,
    managed_runtime_class,
    raw,
    service_account_token,
    token_client,
)
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import RESUME_ANNOTATION, ROLLOUT_CONFIGMAP
from wcow_operator.k8s.kubernetes_api import KubernetesApi
from wcow_operator.reconcile.model import FINALIZER
from wcow_operator.render.webhooks import (
    WEBHOOK_CONFIGURATION,
    Endpoint,
    OwnerReference,
    webhook_configuration,
)

pytestmark = pytest.mark.e2e

POLICY_DELAY = 30  # seconds: a new policy reaches the API server's admission a moment later


@pytest.fixture(scope="module")
def operator(install: Install) -> client.ApiClient:  # noqa: F811 - the fixture imported above
    """The operator's ServiceAccount, by a token of its own (what a thief would hold)."""
    if not install.policy:
        pytest.skip("the server has no ValidatingAdmissionPolicy v1 (needs Kubernetes 1.30+)")
    return token_client(service_account_token(install, install.operator_sa))


# ---- point 4: the webhook configurations ----


def _webhooks(install: Install) -> Callable[..., dict[str, Any]]:  # noqa: F811
    """The configurations as render/webhooks.py makes them for the chart's operator (its
    Service, its namespace, owned by its webhook ClusterRole), with changes to the webhook."""
    service = f"{install.release}-wcow-runtime-operator-webhook"
    role = client.RbacAuthorizationV1Api(install.admin).read_cluster_role(service)
    assert role.metadata is not None
    owner = OwnerReference(
        "rbac.authorization.k8s.io/v1", "ClusterRole", service, str(role.metadata.uid)
    )
    endpoint = Endpoint(service_namespace=install.namespace, service_name=service)

    def rendered(kind: str, classes: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
        body = webhook_configuration(
            kind,
            endpoint,
            classes or (f"{install.release}-unused",),
            ["kube-system", install.namespace],
            ca_bundle=None,
            owner=owner,
        )
        body["webhooks"][0].update(changes)
        return body

    return rendered


@contextlib.contextmanager
def _configurations_removed(admin: client.ApiClient) -> Iterator[None]:
    registration = client.AdmissionregistrationV1Api(admin)
    try:
        yield
    finally:
        for delete in (
            registration.delete_mutating_webhook_configuration,
            registration.delete_validating_webhook_configuration,
        ):
            with contextlib.suppress(ApiException):
                delete(WEBHOOK_CONFIGURATION)


def test_a_stolen_operator_token_cannot_widen_or_switch_off_the_webhook(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    rendered = _webhooks(install)
    stolen = client.AdmissionregistrationV1Api(operator)

    def attempt(kind: str = "mutating", **changes: Any) -> Callable[[], Any]:
        body = rendered(kind, **changes)
        create = getattr(stolen, f"create_{kind}_webhook_configuration")
        return lambda: create(body, dry_run="All")

    # The four the review found, as the issue lists them.
    refused(
        "every namespace, no match condition",
        attempt(namespaceSelector={}, matchConditions=[]),
        "but kube-system and the operator's own",
        timeout=POLICY_DELAY,
    )
    bogus_ca = base64.b64encode(b"not a certificate").decode()
    ignore = rendered("validating", failurePolicy="Ignore")
    ignore["webhooks"][0]["clientConfig"]["caBundle"] = bogus_ca
    refused(
        "failurePolicy Ignore with a bogus CA",
        lambda: stolen.create_validating_webhook_configuration(ignore, dry_run="All"),
        "must keep failurePolicy Fail",
    )
    kube_system_only = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system"]}
        ]
    }
    refused(
        "kube-system only",
        attempt(namespaceSelector=kube_system_only),
        "but kube-system and the operator's own",
    )
    refused(
        "a match condition of true",
        attempt(matchConditions=[{"name": "wcow-runtime-class", "expression": "true"}]),
        "the one match condition wcow-runtime-class",
    )
    # And the rest of the scope.
    condition = rendered("mutating")["webhooks"][0]["matchConditions"][0]
    widened = condition | {"expression": condition["expression"] + " || true"}
    refused(
        "the rendered match condition or true",
        attempt(matchConditions=[widened]),
        "the one match condition",
    )
    refused(
        "an objectSelector",
        attempt(objectSelector={"matchLabels": {"wcow": "no"}}),
        "may not have an objectSelector",
    )
    every_pod_write = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        }
    ]
    refused("every pod write", attempt("validating", rules=every_pod_write), "may see only pods")
    refused("a 30 s timeout", attempt(timeoutSeconds=30), "timeoutSeconds 5")
    refused(
        "a URL",
        attempt(clientConfig={"url": "https://attacker.example.com/mutate"}),
        "may call only its own webhook Service",
    )


def test_the_operator_writes_its_webhook_configurations_as_it_renders_them(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    """Created, then updated with new classes, as rendered (the validating webhook also for pod
    UPDATE and pods/ephemeralcontainers), with the operator's token; an update that switches
    enforcement off is still refused."""
    rendered = _webhooks(install)
    own = client.AdmissionregistrationV1Api(operator)
    with _configurations_removed(install.admin):
        refused(  # the policy is in force before the real writes are judged
            "failurePolicy Ignore",
            lambda: own.create_mutating_webhook_configuration(
                rendered("mutating", failurePolicy="Ignore"), dry_run="All"
            ),
            "failurePolicy Fail",
            timeout=POLICY_DELAY,
        )
        for kind in ("mutating", "validating"):
            getattr(own, f"create_{kind}_webhook_configuration")(rendered(kind))
        classes = (f"{install.release}-a", f"{install.release}-b.c")
        for kind in ("mutating", "validating"):
            read = getattr(own, f"read_{kind}_webhook_configuration")
            replace = getattr(own, f"replace_{kind}_webhook_configuration")
            current = read(WEBHOOK_CONFIGURATION)
            body = rendered(kind, classes)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            stored = replace(WEBHOOK_CONFIGURATION, body)
            assert '"' + classes[1] + '"' in stored.webhooks[0].match_conditions[0].expression
            assert (
                stored.webhooks[0].rules[0].resources
                == body["webhooks"][0]["rules"][0]["resources"]
            )
            off = copy.deepcopy(body)
            off["metadata"]["resourceVersion"] = stored.metadata.resource_version
            off["webhooks"][0]["namespaceSelector"] = {}
            refused(
                "an update that sees every namespace",
                lambda replace=replace, off=off: replace(WEBHOOK_CONFIGURATION, off),
                "but kube-system and the operator's own",
            )


# ---- point 6: RuntimeClasses ----


def _profile_uid(admin: client.ApiClient, name: str) -> str:
    created = client.CustomObjectsApi(admin).create_cluster_custom_object(
        GROUP, VERSION, PLURAL, profile(name, isolation="HyperV", windowsBuild="ltsc2022")
    )
    return str(created["metadata"]["uid"])


def test_a_stolen_operator_token_cannot_touch_other_runtime_classes(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    admin, stolen = client.NodeV1Api(install.admin), client.NodeV1Api(operator)
    gvisor = f"{install.release}-gvisor"
    theirs = admin.create_runtime_class(raw({"metadata": {"name": gvisor}, "handler": "runsc"}))
    assert theirs.metadata is not None
    try:
        # Taking over someone else's class: relabel it as the operator's (then, once it is the
        # operator's, delete it and create it again with another handler).
        hijacked = managed_runtime_class(gvisor)
        hijacked["handler"] = "runsc"
        hijacked["metadata"]["resourceVersion"] = theirs.metadata.resource_version
        refused(
            "relabelling someone else's RuntimeClass as the operator's",
            lambda: stolen.replace_runtime_class(gvisor, hijacked, dry_run="All"),
            "may change or delete only RuntimeClasses it manages",
            timeout=POLICY_DELAY,
        )
        refused(
            "deleting someone else's RuntimeClass",
            lambda: stolen.delete_runtime_class(gvisor, dry_run="All"),
            "may change or delete only RuntimeClasses it manages",
        )
        # Creating classes it does not manage.
        bare = {"metadata": {"name": f"{install.release}-runc"}, "handler": "runc"}
        refused(
            "creating an unlabelled RuntimeClass",
            lambda: stolen.create_runtime_class(raw(bare), dry_run="All"),
            "may create or write only RuntimeClasses it manages",
        )
        unowned = managed_runtime_class(f"{install.release}-runc")
        del unowned["metadata"]["ownerReferences"]
        refused(
            "creating a RuntimeClass owned by no profile",
            lambda: stolen.create_runtime_class(raw(unowned), dry_run="All"),
            "may create or write only RuntimeClasses it manages",
        )
        assert admin.read_runtime_class(gvisor).handler == "runsc"
    finally:
        admin.delete_runtime_class(gvisor)


def test_the_operator_manages_its_classes_and_the_garbage_collector_removes_them(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    """Create, update, adopt what `wcow render` wrote, delete: as reconcile does, with the
    operator's token. Deleting a profile lets the garbage collector remove its class."""
    admin, own = client.NodeV1Api(install.admin), client.NodeV1Api(operator)
    custom = client.CustomObjectsApi(install.admin)
    owned, gitops = f"{install.release}-owned", f"{install.release}-gitops"
    refused(
        "creating an unlabelled RuntimeClass",
        lambda: own.create_runtime_class(
            raw({"metadata": {"name": owned}, "handler": "x"}), dry_run="All"
        ),
        "may create or write only",
        timeout=POLICY_DELAY,
    )
    try:
        rendered = managed_runtime_class(owned, _profile_uid(install.admin, owned))
        created = own.create_runtime_class(raw(rendered))
        assert created.metadata is not None
        changed = copy.deepcopy(rendered)
        changed["overhead"] = {"podFixed": {"cpu": "250m", "memory": "1Gi"}}
        changed["metadata"]["resourceVersion"] = created.metadata.resource_version
        own.replace_runtime_class(owned, raw(changed))

        # `wcow render` output, applied by an admin: the operator adopts it, then deletes it.
        written = managed_runtime_class(gitops)
        del written["metadata"]["ownerReferences"]
        stored = admin.create_runtime_class(raw(written))
        assert stored.metadata is not None
        adopted = managed_runtime_class(gitops, _profile_uid(install.admin, gitops))
        adopted["metadata"]["resourceVersion"] = stored.metadata.resource_version
        own.replace_runtime_class(gitops, raw(adopted))
        own.delete_runtime_class(gitops)

        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, owned)
        wait_for(
            f"the garbage collector to delete RuntimeClass {owned}",
            lambda: _gone(lambda: admin.read_runtime_class(owned)),
            timeout=60,
        )
    finally:
        for name in (owned, gitops):
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            with contextlib.suppress(ApiException):
                admin.delete_runtime_class(name)


def _gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


# ---- profiles: the operator patches them only for its finalizer ----

FOREIGN_FINALIZER = "example.com/hold"
PROFILE_GUARD = "the wcow operator may only remove its finalizer"


def test_a_stolen_operator_token_changes_only_its_finalizer_on_profiles(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    """RBAC grants the operator patch on profiles (for its finalizer): the guard refuses the
    spec, labels, annotations and others' finalizers, whatever the patch type; the operator's
    own adapter adds and removes its finalizer; status stays writable, and carries nothing
    else along."""
    admin, stolen = client.CustomObjectsApi(install.admin), client.CustomObjectsApi(operator)
    name = f"{install.release}-guarded"
    body = profile(name, isolation="HyperV", windowsBuild="ltsc2022")
    body["metadata"] |= {
        "labels": {"team": "windows"},
        "annotations": {"example.com/owner": "platform"},
        "finalizers": [FOREIGN_FINALIZER],
    }
    admin.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

    def patch(changes: Any, content_type: str | None = None) -> Callable[[], Any]:
        return lambda: stolen.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, changes, dry_run="All", _content_type=content_type
        )

    try:
        refused(
            "rolling a change out to every node at once",
            patch({"spec": {"rollout": {"maxUnavailable": "100%"}}}),
            f"{PROFILE_GUARD} {FINALIZER} from a WindowsRuntimeProfile, not change its spec",
            timeout=POLICY_DELAY,
        )
        refused(
            "the spec by JSON patch",
            patch(
                [{"op": "replace", "path": "/spec/isolation", "value": "Process"}],
                "application/json-patch+json",
            ),
            "not change its spec",
        )
        refused(
            "resuming a halted rollout",
            patch({"metadata": {"annotations": {RESUME_ANNOTATION: "1767225600"}}}),
            "not change its annotations",
        )
        refused("relabelling", patch({"metadata": {"labels": {"team": None}}}), "its labels")
        refused(
            "a spec change riding on the finalizer",
            patch(
                {
                    "metadata": {"finalizers": [FOREIGN_FINALIZER, FINALIZER]},
                    "spec": {"handler": f"{name}-evil"},
                }
            ),
            "not change its spec",
        )
        refused(
            "dropping someone else's finalizer",
            patch({"metadata": {"finalizers": [FINALIZER]}}),
            "not change its other finalizers",
        )

        refused(
            "adding its finalizer (this version adds none: it would hold the profile)",
            patch({"metadata": {"finalizers": [FOREIGN_FINALIZER, FINALIZER]}}),
            "not change its finalizers (it adds none)",
        )
        # As the controller sends it (controller.py "remove-finalizer") to a profile left
        # with the finalizer of earlier versions.
        admin.patch_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            name,
            {"metadata": {"finalizers": [FOREIGN_FINALIZER, FINALIZER]}},
        )
        own = KubernetesApi(operator)
        current = admin.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        version = current["metadata"]["resourceVersion"]
        patched = own.patch_profile(
            name, {"metadata": {"finalizers": [FOREIGN_FINALIZER], "resourceVersion": version}}
        )
        assert patched["metadata"]["finalizers"] == [FOREIGN_FINALIZER]
        # The status subresource is not guarded, and keeps nothing but the status: a PUT
        # as the controller sends it, with a spec and labels riding on it.
        forged = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WindowsRuntimeProfile",
            "metadata": {
                "name": name,
                "resourceVersion": patched["metadata"]["resourceVersion"],
                "labels": {"team": "x"},
            },
            "spec": {"isolation": "Process"},
            "status": {"observedGeneration": 1},
        }
        own.update_profile_status(name, forged)
        stored = admin.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        assert stored["status"] == {"observedGeneration": 1}
        assert stored["spec"] == body["spec"]
        assert stored["metadata"]["labels"] == body["metadata"]["labels"]
        assert stored["metadata"]["annotations"] == body["metadata"]["annotations"]
    finally:
        with contextlib.suppress(ApiException):
            admin.patch_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
            )
        with contextlib.suppress(ApiException):
            admin.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


# ---- point 5: who writes the plan ----

NAMESPACE_ADMIN = "jane@example.com"


def _config_map_writer(admin: client.ApiClient, ns: str, user: str) -> None:
    """RBAC lets ``user`` do anything with ConfigMaps in ``ns`` (as a namespace admin may):
    what stops a forged plan must be the policy."""
    rbac_api = client.RbacAuthorizationV1Api(admin)
    name = f"configmaps-{uuid.uuid4().hex[:6]}"
    rbac_api.create_namespaced_role(
        ns,
        raw(
            {
                "metadata": {"name": name},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
            }
        ),
    )
    kind = "ServiceAccount" if user.startswith("system:serviceaccount:") else "User"
    subject: dict[str, Any] = {"kind": kind, "name": user.rsplit(":", 1)[-1]}
    if kind == "ServiceAccount":
        subject["namespace"] = user.split(":")[2]
    else:
        subject["apiGroup"] = "rbac.authorization.k8s.io"
    rbac_api.create_namespaced_role_binding(
        ns,
        raw(
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": name,
                },
                "subjects": [subject],
            }
        ),
    )


def _config_map(name: str, text: str) -> dict[str, Any]:
    key = "plan.json" if name == PLAN_CONFIGMAP else "rollout.json"
    return {"metadata": {"name": name}, "data": {key: text}}


def test_only_the_operator_writes_the_plan_and_the_rollout(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    ns = install.namespace
    own = client.CoreV1Api(operator)
    _config_map_writer(install.admin, ns, NAMESPACE_ADMIN)
    jane = client.CoreV1Api(impersonating(NAMESPACE_ADMIN))
    forged = (
        '{"schemaVersion":1,"handlers":{"evil":{"runtime_path":"C:\\\\Windows\\\\Temp\\\\x.exe"}}}'
    )
    refused(
        "a namespace admin creating the plan",
        lambda: jane.create_namespaced_config_map(
            ns, raw(_config_map(PLAN_CONFIGMAP, forged)), dry_run="All"
        ),
        "only the wcow operator's ServiceAccount",
        timeout=POLICY_DELAY,
    )
    # Left in place: the policy refuses even the admin's deletion; the namespace goes at the end.
    for name in (PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP):
        created = own.create_namespaced_config_map(ns, raw(_config_map(name, "{}")))
        assert created.metadata is not None
        created.data = {**(created.data or {}), "written": "by the operator"}
        own.replace_namespaced_config_map(name, ns, created)
        # The namespace admin: neither rewrite, patch nor delete (the forgery of point 5).
        current = jane.read_namespaced_config_map(name, ns)
        current.data = {"plan.json" if name == PLAN_CONFIGMAP else "rollout.json": forged}
        refused(
            "a namespace admin rewriting it",
            lambda name=name, current=current: jane.replace_namespaced_config_map(
                name, ns, current
            ),
            "only the wcow operator's ServiceAccount",
        )
        refused(
            "a namespace admin patching it",
            lambda name=name: jane.patch_namespaced_config_map(
                name, ns, {"metadata": {"annotations": {"runtime.wcow.dev/rollout": "x"}}}
            ),
            "only the wcow operator's ServiceAccount",
        )
        refused(
            "a namespace admin deleting it",
            lambda name=name: jane.delete_namespaced_config_map(name, ns),
            "only the wcow operator's ServiceAccount",
        )
    # Not by deleting the lot either: deletecollection admits each object without a name.
    refused(
        "a namespace admin deleting every ConfigMap",
        lambda: jane.delete_collection_namespaced_config_map(ns),
        "only the wcow operator's ServiceAccount",
    )
    assert client.CoreV1Api(install.admin).read_namespaced_config_map(PLAN_CONFIGMAP, ns)
    # And the operator's token makes no other ConfigMap there.
    refused(
        "the operator creating another ConfigMap",
        lambda: own.create_namespaced_config_map(
            ns, raw({"metadata": {"name": "kube-root-ca.crt.evil"}}), dry_run="All"
        ),
        "may write only the ConfigMaps wcow-runtime-plan and wcow-runtime-rollout",
    )


def test_deleting_a_namespace_still_deletes_its_plan(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    """The namespace controller empties a namespace being deleted under its own identity: the
    guard lets it delete the plan there, so the namespace goes."""
    core = client.CoreV1Api(install.admin)
    ns = f"{install.release}-gone"
    core.create_namespace(raw({"metadata": {"name": ns}}))
    try:
        writer = f"system:serviceaccount:{ns}:{install.operator_sa}"
        _config_map_writer(install.admin, ns, writer)
        client.CoreV1Api(impersonating(writer)).create_namespaced_config_map(
            ns, raw(_config_map(PLAN_CONFIGMAP, "{}"))
        )
        refused(
            "an admin deleting the plan",
            lambda: client.CoreV1Api(install.admin).delete_namespaced_config_map(
                PLAN_CONFIGMAP, ns, dry_run="All"
            ),
            "only the wcow operator's ServiceAccount",
            timeout=POLICY_DELAY,
        )
        core.delete_namespace(ns)
        wait_for(
            f"namespace {ns} to be deleted with its plan",
            lambda: _gone(lambda: core.read_namespace(ns)),
            timeout=60,
        )
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)


# ---- events (least privilege) ----


def _node_event(namespace_: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"generateName": f"{node}.wcow-agent.", "namespace": namespace_},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": "CanaryPassed",
        "message": "e2e",
        "type": "Normal",
    }


def test_the_agent_posts_events_only_about_its_own_node_in_default(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
) -> None:
    """RBAC lets the agent's token create events in every namespace; the policy holds it to
    default and its own Node (a compromised node cannot warn about other nodes or pods)."""
    own, other = f"{install.release}-win-a", f"{install.release}-win-b"
    agent = client.CoreV1Api(impersonating(install.agent_user, node=own))
    refused(
        "the agent posting about another Node",
        lambda: agent.create_namespaced_event("default", raw(_node_event("default", other))),
        "only about its own Node",
        timeout=POLICY_DELAY,
    )
    # The API server keeps events about Nodes in default itself; about a tenant's pod:
    about_a_pod = _node_event(install.namespace, own)
    about_a_pod["involvedObject"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-0",
        "namespace": install.namespace,
    }
    refused(
        "the agent posting about a pod in another namespace",
        lambda: agent.create_namespaced_event(install.namespace, raw(about_a_pod)),
        "only in the namespace default",
    )
    agent.create_namespaced_event("default", raw(_node_event("default", own)))
    operator_events = client.CoreV1Api(operator)
    refused(
        "the operator posting about a Node",
        lambda: operator_events.create_namespaced_event(
            "default", raw(_node_event("default", own))
        ),
        "the operator only about WindowsRuntimeProfiles",
    )
    drained = {**_node_event("default", own), "reason": "Cordoned"}  # the drainer's own
    operator_events.create_namespaced_event("default", raw(drained))


def test_the_server_type_checks_every_policy_without_warnings(
    install: Install,  # noqa: F811 - the fixture imported above
) -> None:
    """The API server checks each validation against the matched kinds' schemas (status
    .typeChecking, written by kube-controller-manager): a misspelt field would be a warning
    there, and an error at request time, which failurePolicy Fail turns into a refusal."""
    if not install.policy:
        pytest.skip("the server has no ValidatingAdmissionPolicy v1 (needs Kubernetes 1.30+)")
    registration = client.AdmissionregistrationV1Api(install.admin)
    names = [
        o["metadata"]["name"] for o in install.objects if o["kind"] == "ValidatingAdmissionPolicy"
    ]
    assert len(names) == 7

    def checked(name: str) -> Any:
        policy = registration.read_validating_admission_policy(name)
        status = policy.status
        if status is None or status.observed_generation != policy.metadata.generation:
            return None
        return status.type_checking or client.V1TypeChecking(expression_warnings=[])

    for name in names:
        result = wait_for(f"policy {name} type-checked", lambda name=name: checked(name))
        warnings = [f"{w.field_ref}: {w.warning}" for w in result.expression_warnings or []]
        assert warnings == [], name


@pytest.mark.parametrize("profiles", [1450])
def test_the_webhook_guard_admits_many_profiles_within_its_cost_budget(
    install: Install,  # noqa: F811 - the fixture imported above
    operator: client.ApiClient,
    profiles: int,
) -> None:
    """The match condition grows with the profiles; the guard's regular expression over it must
    stay within the API server's CEL cost budget, or the operator could not publish it. 1450
    names of 63 characters come near the server's own limit on one CEL expression (100,000
    code points: cel-go v0.26.0 parser/parser.go), which binds first."""
    rendered = _webhooks(install)
    classes = tuple(f"{i:04d}-" + "p" * 58 for i in range(profiles))  # 63-character names
    own = client.AdmissionregistrationV1Api(operator)
    refused(
        "failurePolicy Ignore",
        lambda: own.create_mutating_webhook_configuration(
            rendered("mutating", failurePolicy="Ignore"), dry_run="All"
        ),
        "failurePolicy Fail",
        timeout=POLICY_DELAY,
    )
    for kind in ("mutating", "validating"):
        getattr(own, f"create_{kind}_webhook_configuration")(rendered(kind, classes), dry_run="All")
