"""The node self-patch policy, evaluated with cel-python on admission requests like the ones
the API server builds: the agent may change only its own Node, and there only
runtime.wcow.dev/* labels and annotations. (The e2e tests check the real API server.)"""

from __future__ import annotations

import copy
import functools
from typing import Any

import celpy
import pytest
import yaml
from deploy.generate import NAMESPACE, RELEASE

from tests.conftest import profile_document
from tests.controller.fake_api import FakeApi, RelistingCache
from tests.delivery.helpers import find, render
from wcow_contract.errors import parse_profile
from wcow_contract.labels import STARTUP_TAINT
from wcow_contract.v1alpha1 import GROUP, PLURAL, VERSION
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION
from wcow_contract.wire.plan import PLAN_CONFIGMAP, build_plan
from wcow_contract.wire.rollout import RESUME_ANNOTATION, ROLLOUT_CONFIGMAP
from wcow_operator.controller.controller import Controller
from wcow_operator.controller.metrics import Metrics
from wcow_operator.reconcile.model import FINALIZER, ReconcileSettings
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.runtimeclass import render_runtime_class
from wcow_operator.render.webhooks import Endpoint, OwnerReference, webhook_configuration

AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-agent"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"


AGENT_POLICY = f"{RELEASE}-agent-node-self-patch"
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-operator"
OPERATOR_POLICY = f"{RELEASE}-operator-webhook-guard"


@functools.cache
def _policy(name: str = AGENT_POLICY) -> dict[str, Any]:
    return find(render(), "ValidatingAdmissionPolicy", name)


def admit(
    old: dict[str, Any], new: dict[str, Any], user: str = AGENT_USER, node: str | None = "win-1"
) -> tuple[bool, list[str]]:
    """(allowed, messages) for an UPDATE of Node ``old`` to ``new`` by ``user`` whose token
    names ``node`` (None: a token without node information)."""
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        user_info["extra"] = {NODE_NAME_KEY: [node], "authentication.kubernetes.io/pod-name": ["p"]}
    request = {"operation": "UPDATE", "userInfo": user_info}
    return evaluate_policy(_policy(), request, new, old)


def evaluate_policy(
    policy: dict[str, Any],
    request: dict[str, Any],
    new: dict[str, Any] | None,
    old: dict[str, Any] | None,
    namespace_object: dict[str, Any] | None = None,
) -> tuple[bool, list[str]]:
    """(allowed, messages): ``policy`` evaluated as the API server does, with cel-python
    (``request`` is the AdmissionRequest's fields the policies read). An expression that
    cannot be evaluated refuses, as it does under failurePolicy Fail. A refusal's message is
    its messageExpression's value, else its message."""
    spec = policy["spec"]
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
        "namespaceObject": celpy.json_to_cel(namespace_object),
    }

    def evaluate(expression: str) -> Any:
        program = env.program(env.compile(expression), functions={"join": _join})
        result = program.evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            raise result
        return result

    try:
        if not all(bool(evaluate(c["expression"])) for c in spec["matchConditions"]):
            return True, ["not matched"]
        variables: dict[str, Any] = {}
        for variable in spec.get("variables", []):
            activation["variables"] = _as_cel(variables)
            variables[variable["name"]] = evaluate(variable["expression"])
        activation["variables"] = _as_cel(variables)
        failed = [
            str(evaluate(v["messageExpression"])) if "messageExpression" in v else v["message"]
            for v in spec["validations"]
            if not bool(evaluate(v["expression"]))
        ]
    except celpy.CELEvalError as error:
        return False, [f"evaluation error: {error.args[0] if error.args else error}"]
    return not failed, failed


def _join(items: Any, separator: Any = "") -> Any:
    """``list.join(separator)`` of the Kubernetes CEL strings library (cel-go ext.Strings),
    which cel-python does not have."""
    return celpy.celtypes.StringType(str(separator).join(str(item) for item in items))


def _as_cel(variables: dict[str, Any]) -> Any:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})


NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "win-1",
        "labels": {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.20348"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
    },
    "spec": {
        "podCIDR": "10.244.1.0/24",
        "taints": [{"key": "os", "value": "windows", "effect": "NoSchedule"}],
    },
}


def changed(node: dict[str, Any] = NODE, **edits: Any) -> dict[str, Any]:
    new = copy.deepcopy(node)
    for path, value in edits.items():
        target = new
        *parents, leaf = path.split("__")
        for parent in parents:
            target = target.setdefault(parent, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return new


def test_agent_may_label_its_own_node_ready() -> None:
    labels = {**NODE["metadata"]["labels"], "runtime.wcow.dev/hyperv-ltsc2022": "ready"}
    assert admit(NODE, changed(metadata__labels=labels)) == (True, [])


def test_agent_may_write_its_status_annotation_and_remove_its_labels() -> None:
    labelled = changed(
        metadata__labels={**NODE["metadata"]["labels"], "runtime.wcow.dev/h": "ready"}
    )
    annotations = {
        **NODE["metadata"]["annotations"],
        AGENT_STATUS_ANNOTATION: '{"schemaVersion":1}',
    }
    assert admit(labelled, changed(NODE, metadata__annotations=annotations))[0]


def test_agent_may_not_touch_another_node() -> None:
    labels = {**NODE["metadata"]["labels"], "runtime.wcow.dev/h": "ready"}
    allowed, messages = admit(NODE, changed(metadata__labels=labels), node="win-2")
    assert not allowed
    assert "only its own Node" in messages[0]


def test_a_token_without_a_node_is_refused() -> None:
    labels = {**NODE["metadata"]["labels"], "runtime.wcow.dev/h": "ready"}
    assert not admit(NODE, changed(metadata__labels=labels), node=None)[0]


@pytest.mark.parametrize(
    "edit",
    [
        {"metadata__labels": {**NODE["metadata"]["labels"], "kubernetes.io/os": "linux"}},
        {"metadata__labels": {"kubernetes.io/os": "windows"}},  # drops windows-build
        {"metadata__labels": {**NODE["metadata"]["labels"], "example.com/pool": "hyperv"}},
        {"metadata__labels": {**NODE["metadata"]["labels"], "foo.runtime.wcow.dev/x": "y"}},
        {"metadata__annotations": {**NODE["metadata"]["annotations"], "example.com/a": "b"}},
        {"metadata__annotations": None},
        {"spec__unschedulable": True},
        {"spec__taints": []},
        {"metadata__finalizers": ["example.com/hold"]},
    ],
    ids=[
        "relabel-os",
        "drop-a-label",
        "foreign-label",
        "look-alike-prefix",
        "foreign-annotation",
        "drop-annotations",
        "cordon",
        "untaint",
        "finalizer",
    ],
)
def test_agent_may_change_nothing_else(edit: dict[str, Any]) -> None:
    allowed, messages = admit(NODE, changed(**edit))
    assert not allowed
    assert messages


STARTUP = {"key": STARTUP_TAINT, "value": "pending", "effect": "NoSchedule"}
OS_TAINT = {"key": "os", "value": "windows", "effect": "NoSchedule"}
NEW_NODE = changed(spec__taints=[OS_TAINT, STARTUP])


def test_agent_may_remove_its_startup_taint_from_its_own_node() -> None:
    assert admit(NEW_NODE, changed(NEW_NODE, spec__taints=[OS_TAINT])) == (True, [])
    only = changed(NEW_NODE, spec__taints=[STARTUP])
    assert admit(only, changed(only, spec__taints=None)) == (True, []), "the last taint"
    allowed, messages = admit(NEW_NODE, changed(NEW_NODE, spec__taints=[OS_TAINT]), node="win-2")
    assert not allowed
    assert "only its own Node" in messages[0]


@pytest.mark.parametrize(
    "edit",
    [
        {"spec__taints": [STARTUP]},  # removes another taint
        {"spec__taints": [OS_TAINT, STARTUP, {"key": "x", "effect": "NoSchedule"}]},  # adds
        {"spec__taints": [OS_TAINT], "spec__unschedulable": True},  # and cordons
        {"spec__taints": [OS_TAINT], "spec__podCIDR": "10.0.0.0/8"},  # and re-addresses
        {"spec__taints": [OS_TAINT], "spec__providerID": "aws:///i-1"},
        {"spec__taints": [OS_TAINT, {**STARTUP, "effect": "NoExecute"}]},  # changes its effect
    ],
    ids=["other-taint", "adds-a-taint", "cordons", "pod-cidr", "provider-id", "re-effects"],
)
def test_removing_the_startup_taint_is_the_only_spec_change_allowed(edit: dict[str, Any]) -> None:
    allowed, messages = admit(NEW_NODE, changed(NEW_NODE, **edit))
    assert not allowed
    assert "remove its startup taint" in messages[-1]


def test_without_a_startup_taint_configured_no_taint_may_go() -> None:
    policy = copy.deepcopy(_policy())
    for variable in policy["spec"]["variables"]:
        if variable["name"] == "startupTaint":
            variable["expression"] = "''"
    user = {"username": AGENT_USER, "extra": {NODE_NAME_KEY: ["win-1"]}}
    new = changed(NEW_NODE, spec__taints=[OS_TAINT])
    allowed, _ = evaluate_policy(policy, {"operation": "UPDATE", "userInfo": user}, new, NEW_NODE)
    assert not allowed


def test_the_chart_passes_the_agent_the_taint_the_policy_allows() -> None:
    daemonset = find(render(), "DaemonSet", f"{RELEASE}-agent")
    pod = daemonset["spec"]["template"]["spec"]
    assert f"--startup-taint={STARTUP_TAINT}" in pod["containers"][0]["args"]
    assert {"key": STARTUP_TAINT, "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_others_are_not_restricted() -> None:
    edit = changed(spec__unschedulable=True)
    assert admit(NODE, edit, user="kubernetes-admin", node=None) == (True, ["not matched"])
    operator = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-operator"
    assert admit(NODE, edit, user=operator, node=None)[0]
    look_alike = f"system:serviceaccount:{NAMESPACE}:evil-{RELEASE}-agent"
    assert admit(NODE, edit, user=look_alike, node=None)[0]


def test_the_agent_account_is_matched_in_any_namespace() -> None:
    """A kustomize overlay that moves the namespace keeps the guard (it only restricts)."""
    elsewhere = f"system:serviceaccount:windows-runtime:{RELEASE}-agent"
    assert not admit(NODE, changed(spec__unschedulable=True), user=elsewhere)[0]


def test_the_policy_binds_with_deny_and_fails_closed() -> None:
    objects = render()
    policy = find(objects, "ValidatingAdmissionPolicy", AGENT_POLICY)
    binding = find(objects, "ValidatingAdmissionPolicyBinding", AGENT_POLICY)
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]


# ---- the operator's webhook configurations ----

WEBHOOK_SERVICE = f"{RELEASE}-operator-webhook"
KIND_RESOURCES = {
    "mutating": "mutatingwebhookconfigurations",
    "validating": "validatingwebhookconfigurations",
}


def _configuration(
    kind: str = "mutating",
    classes: tuple[str, ...] = ("hv",),
    namespace: str = NAMESPACE,
    **changes: Any,
) -> dict[str, Any]:
    """What the operator writes (render.webhooks, as main.py and the chart configure it),
    with ``changes`` to its webhook."""
    body = webhook_configuration(
        kind,
        Endpoint(service_namespace=namespace, service_name=WEBHOOK_SERVICE),
        classes,
        ["kube-system", namespace],
        ca_bundle="Q0EgYnVuZGxl",
        owner=OwnerReference("rbac.authorization.k8s.io/v1", "ClusterRole", WEBHOOK_SERVICE, "u"),
    )
    body["webhooks"][0].update(changes)
    return body


def guard(
    body: dict[str, Any],
    user: str = OPERATOR_USER,
    kind: str = "mutating",
    operation: str = "CREATE",
) -> tuple[bool, list[str]]:
    request = {
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:serviceaccounts"]},
        "resource": {
            "group": "admissionregistration.k8s.io",
            "version": "v1",
            "resource": KIND_RESOURCES[kind],
        },
    }
    return evaluate_policy(_policy(OPERATOR_POLICY), request, body, None)


@pytest.mark.parametrize("kind", list(KIND_RESOURCES))
@pytest.mark.parametrize(
    "classes",
    [(), ("hv",), ("hyperv-ltsc2022", "wcow-process", "a.b-c", "0")],
    ids=["no-profile", "one", "several"],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_operator_may_write_its_webhook_configurations_as_it_renders_them(
    kind: str, classes: tuple[str, ...], operation: str
) -> None:
    body = _configuration(kind, classes)
    assert guard(body, kind=kind, operation=operation) == (True, [])


def test_the_validating_webhook_may_also_see_pod_updates() -> None:
    """The VM annotations of a wcow pod must not change after admission: the validating
    webhook may see UPDATE (and ephemeral containers added), the mutating one never."""
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods", "pods/ephemeralcontainers"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert guard(_configuration("validating", rules=rules), kind="validating")[0]
    allowed, messages = guard(_configuration("mutating", rules=rules))
    assert not allowed
    assert any("may see only pods" in m for m in messages), messages
    # Nor may a stolen token drop the ephemeral containers, or UPDATE, from the validating
    # webhook: a pod re-annotated after admission would get whatever VM it asks for.
    pods_only = [rules[0] | {"resources": ["pods"]}]
    allowed, messages = guard(_configuration("validating", rules=pods_only), kind="validating")
    assert not allowed
    create_only = [rules[0] | {"operations": ["CREATE"]}]
    allowed, messages = guard(_configuration("validating", rules=create_only), kind="validating")
    assert not allowed
    assert any("CREATE and UPDATE of pods and their ephemeral" in m for m in messages), messages


def test_an_operator_moved_to_another_namespace_may_write_its_own() -> None:
    moved = f"system:serviceaccount:windows-runtime:{RELEASE}-operator"
    assert guard(_configuration(namespace="windows-runtime"), user=moved) == (True, [])


def _rule(**changes: Any) -> list[dict[str, Any]]:
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["pods"],
        "operations": ["CREATE"],
        "scope": "Namespaced",
    }
    return [rule | changes]


def _not_in(*values: str) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(values)}
        ]
    }


def _condition(expression: str, name: str = "wcow-runtime-class") -> list[dict[str, str]]:
    return [{"name": name, "expression": expression}]


RENDERED_CONDITION = 'has(object.spec.runtimeClassName) && object.spec.runtimeClassName in ["hv"]'
OWN_SERVICE = {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "port": 443, "path": "/mutate-pods"}

# Each way a stolen operator token could widen the webhook (see more pods or other requests,
# call another server) or weaken it (let wcow pods past the checks): change -> why refused.
ATTACKS: dict[str, tuple[dict[str, Any], str]] = {
    # as a review found them
    "every-namespace-no-condition": (
        {"namespaceSelector": {}, "matchConditions": []},
        "but kube-system and the operator's own",
    ),
    "ignore-with-bogus-ca": (
        {
            "failurePolicy": "Ignore",
            "clientConfig": {"service": OWN_SERVICE, "caBundle": "Ym9ndXM="},
        },
        "failurePolicy Fail",
    ),
    "kube-system-only": (
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["kube-system"],
                    }
                ]
            }
        },
        "but kube-system and the operator's own",
    ),
    "condition-true": ({"matchConditions": _condition("true")}, "one match condition"),
    # the scope
    "kube-system-not-excluded": ({"namespaceSelector": _not_in(NAMESPACE)}, "kube-system"),
    "operator-namespace-not-excluded": (
        {"namespaceSelector": _not_in("kube-system")},
        "kube-system",
    ),
    "a-tenant-excluded": (
        {"namespaceSelector": _not_in("kube-system", NAMESPACE, "tenant-a")},
        "but kube-system and the operator's own",
    ),
    "namespace-labels": (
        {"namespaceSelector": _not_in("kube-system", NAMESPACE) | {"matchLabels": {"a": "b"}}},
        "but kube-system and the operator's own",
    ),
    "second-expression": (
        {
            "namespaceSelector": {
                "matchExpressions": [
                    *_not_in("kube-system", NAMESPACE)["matchExpressions"],
                    {"key": "wcow", "operator": "Exists"},
                ]
            }
        },
        "but kube-system and the operator's own",
    ),
    "no-namespace-selector": ({"namespaceSelector": None}, "but kube-system"),
    "object-selector": ({"objectSelector": {"matchLabels": {"skip": "no"}}}, "objectSelector"),
    "object-selector-expression": (
        {"objectSelector": {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}},
        "objectSelector",
    ),
    "condition-or-true": (
        {"matchConditions": _condition(RENDERED_CONDITION + " || true")},
        "one match condition",
    ),
    "condition-prefixed": (
        {"matchConditions": _condition("true || " + RENDERED_CONDITION)},
        "one match condition",
    ),
    "condition-injected-name": (
        {"matchConditions": _condition(RENDERED_CONDITION.replace('"hv"', '"hv" || true, "x"'))},
        "one match condition",
    ),
    "condition-other-field": (
        {
            "matchConditions": _condition(
                'has(object.spec.runtimeClassName) && object.metadata.name in ["hv"]'
            )
        },
        "one match condition",
    ),
    "condition-renamed": (
        {"matchConditions": _condition(RENDERED_CONDITION, name="other")},
        "one match condition",
    ),
    "second-condition": (
        {"matchConditions": [*_condition(RENDERED_CONDITION), *_condition("false", "never")]},
        "one match condition",
    ),
    "no-condition": ({"matchConditions": None}, "one match condition"),
    # the requests it sees
    "secrets": ({"rules": _rule(resources=["secrets"])}, "may see only pods"),
    "everything": (
        {
            "rules": _rule(
                apiGroups=["*"], apiVersions=["*"], resources=["*"], operations=["*"], scope="*"
            )
        },
        "may see only pods",
    ),
    "pod-subresources": ({"rules": _rule(resources=["pods", "pods/exec"])}, "may see only pods"),
    "all-versions": ({"rules": _rule(apiVersions=["*"])}, "may see only pods"),
    "mutate-updates": ({"rules": _rule(operations=["CREATE", "UPDATE"])}, "may see only pods"),
    "deletes": ({"rules": _rule(operations=["CREATE", "DELETE"])}, "may see only pods"),
    "two-rules": ({"rules": [*_rule(), *_rule(resources=["configmaps"])]}, "may see only pods"),
    # where it calls
    "url": ({"clientConfig": {"url": "https://attacker.example.com/"}}, "only its own webhook"),
    "other-service": (
        {"clientConfig": {"service": OWN_SERVICE | {"name": "evil"}}},
        "only its own webhook",
    ),
    "other-namespace": (
        {"clientConfig": {"service": OWN_SERVICE | {"namespace": "default"}}},
        "only its own webhook",
    ),
    "other-port": (
        {"clientConfig": {"service": OWN_SERVICE | {"port": 8443}}},
        "only its own webhook",
    ),
    "other-path": (
        {"clientConfig": {"service": OWN_SERVICE | {"path": "/validate-pods"}}},
        "only its own webhook",
    ),
    # how it behaves
    "side-effects": ({"sideEffects": "Some"}, "sideEffects None"),
    "long-timeout": ({"timeoutSeconds": 30}, "timeoutSeconds 5"),
    "exact-match": ({"matchPolicy": "Exact"}, "matchPolicy Equivalent"),
    "reinvoked": ({"reinvocationPolicy": "IfNeeded"}, "reinvocationPolicy Never"),
    "old-review": ({"admissionReviewVersions": ["v1beta1"]}, "admissionReviewVersions"),
    "renamed-webhook": ({"name": "anything.example.com"}, "exactly one webhook"),
}


@pytest.mark.parametrize(("change", "why"), ATTACKS.values(), ids=ATTACKS.keys())
def test_a_stolen_operator_token_cannot_widen_or_weaken_the_webhook(
    change: dict[str, Any], why: str
) -> None:
    body = _configuration()
    hook = body["webhooks"][0]
    for key, value in change.items():
        if value is None:
            hook.pop(key)
        else:
            hook[key] = value
    allowed, messages = guard(body)
    assert not allowed
    assert any(why in m for m in messages), messages


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda b: b["metadata"].update(name="intercept-everything"), "only the webhook"),
        (lambda b: b["webhooks"].append(copy.deepcopy(b["webhooks"][0])), "exactly one webhook"),
        (lambda b: b.update(webhooks=[]), "exactly one webhook"),
        (lambda b: b["metadata"].pop("ownerReferences"), "owned by the ClusterRole"),
        (
            lambda b: b["metadata"]["ownerReferences"][0].update(name="cluster-admin"),
            "owned by the ClusterRole",
        ),
    ],
    ids=["other-name", "second-webhook", "no-webhook", "no-owner", "other-owner"],
)
def test_the_configuration_itself_is_pinned(edit: Any, why: str) -> None:
    body = _configuration()
    edit(body)
    allowed, messages = guard(body)
    assert not allowed
    assert any(why in m for m in messages), messages


def test_the_webhook_names_and_paths_go_with_their_kind() -> None:
    """A mutating configuration holding the validating webhook (or the reverse) is refused:
    the mutating path would then be skipped."""
    body = _configuration("validating")
    allowed, _ = guard(body, kind="mutating")
    assert not allowed


def test_the_guard_only_restricts_the_operator() -> None:
    body = _configuration(clientConfig={"url": "https://other.example.com/"})
    body["metadata"]["name"] = "someone-elses"
    assert guard(body, user="system:serviceaccount:kube-system:other-operator")[0]
    moved = f"system:serviceaccount:windows-runtime:{RELEASE}-operator"
    assert not guard(_configuration(), user=moved)[0]  # its Service is in wcow-system


def test_the_guard_pins_what_render_webhooks_renders() -> None:
    """The chart's numbers are the operator's: a change of the timeout, the paths or the
    webhook names in render/webhooks.py must change the guard too (this test then fails)."""
    from wcow_operator.render import webhooks

    text = yaml.safe_dump(_policy(OPERATOR_POLICY))
    assert f"w.timeoutSeconds == {webhooks.TIMEOUT_SECONDS}" in text
    for path in (webhooks.MUTATE_ID, webhooks.VALIDATE_ID):
        assert f"/{path}" in text
    assert f".{webhooks.WEBHOOK_NAME_SUFFIX}'" in text
    assert f"'{webhooks.WEBHOOK_CONFIGURATION}'" in text


# ---- the operator's RuntimeClasses ----

RUNTIMECLASS_POLICY = f"{RELEASE}-operator-runtimeclass-guard"


def _runtime_class(name: str = "hv", uid: str | None = "3f1c-uid", **spec: Any) -> dict[str, Any]:
    """The RuntimeClass reconcile renders for profile ``name`` (with its uid: the operator's;
    without: what `wcow render` writes for GitOps)."""
    document = profile_document(name, **spec)
    if uid is not None:
        document["metadata"]["uid"] = uid
    return render_runtime_class(parse_profile(document))


def _someone_elses(name: str = "gvisor") -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "handler": "runsc",
    }


def runtime_class_guard(
    operation: str,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    user: str = OPERATOR_USER,
) -> tuple[bool, list[str]]:
    request = {
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:serviceaccounts"]},
        "resource": {"group": "node.k8s.io", "version": "v1", "resource": "runtimeclasses"},
    }
    return evaluate_policy(_policy(RUNTIMECLASS_POLICY), request, new, old)


def test_the_operator_may_create_change_and_delete_the_classes_it_renders() -> None:
    rendered = _runtime_class()
    assert runtime_class_guard("CREATE", rendered) == (True, [])
    changed = copy.deepcopy(rendered)
    changed["overhead"] = {"podFixed": {"cpu": "1", "memory": "1Gi"}}
    changed["metadata"]["labels"]["team"] = "kept-from-someone"  # reconcile keeps others' keys
    changed["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "y"}
    )  # and others' non-controller references
    assert runtime_class_guard("UPDATE", changed, rendered) == (True, [])
    assert runtime_class_guard("DELETE", None, rendered) == (True, [])


def test_the_operator_may_adopt_and_replace_what_wcow_render_wrote() -> None:
    """`wcow render` output carries the labels but no owner: the operator adopts it (UPDATE
    adding its reference) or, when the handler changed, deletes and creates it again."""
    gitops = _runtime_class(uid=None)
    assert "ownerReferences" not in gitops["metadata"]
    assert runtime_class_guard("UPDATE", _runtime_class(), gitops) == (True, [])
    assert runtime_class_guard("DELETE", None, gitops) == (True, [])
    # No profile label on a long name (label values are at most 63): the annotation names it.
    long_name = _runtime_class("windows." + "p" * 70, uid=None, handler="p")
    assert "runtime.wcow.dev/profile" not in long_name["metadata"]["labels"]
    assert runtime_class_guard("DELETE", None, long_name) == (True, [])


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    copied = copy.deepcopy(body)
    target = copied
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return copied


def _with_owner(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    copied = copy.deepcopy(body)
    copied["metadata"]["ownerReferences"][0].update(changes)
    return copied


def _renamed(body: dict[str, Any], name: str) -> dict[str, Any]:
    """``body`` under another name: its labels and annotation still name the profile."""
    copied = copy.deepcopy(body)
    copied["metadata"]["name"] = name
    return copied


CREATE_OR_WRITE = "may create or write only RuntimeClasses it manages"
CHANGE_OR_DELETE = "may change or delete only RuntimeClasses it manages"

RUNTIMECLASS_ATTACKS: dict[str, tuple[str, Any, Any, str]] = {
    # (operation, new, old, why)
    "create-unlabelled": ("CREATE", _someone_elses("evil"), None, CREATE_OR_WRITE),
    "create-without-owner": ("CREATE", _runtime_class(uid=None), None, CREATE_OR_WRITE),
    "create-owned-by-another-kind": (
        "CREATE",
        _with_owner(_runtime_class(), apiVersion="apps/v1", kind="Deployment"),
        None,
        CREATE_OR_WRITE,
    ),
    "create-owned-by-another-profile": (
        "CREATE",
        _with_owner(_runtime_class("gvisor"), name="hv"),
        None,
        CREATE_OR_WRITE,
    ),
    "create-owner-not-controller": (
        "CREATE",
        _with_owner(_runtime_class(), controller=False),
        None,
        CREATE_OR_WRITE,
    ),
    "create-unlabelled-owned": (
        "CREATE",
        _without(_runtime_class(), "metadata", "labels", "app.kubernetes.io/managed-by"),
        None,
        CREATE_OR_WRITE,
    ),
    "take-over-gvisor": ("UPDATE", _runtime_class("gvisor"), _someone_elses(), CHANGE_OR_DELETE),
    "delete-gvisor": ("DELETE", None, _someone_elses(), CHANGE_OR_DELETE),
    "delete-a-labelled-class-owned-by-another-controller": (
        "DELETE",
        None,
        _with_owner(_runtime_class(), apiVersion="apps/v1", kind="Deployment"),
        CHANGE_OR_DELETE,
    ),
    "delete-a-labelled-class-naming-another-profile": (
        "DELETE",
        None,
        _renamed(_runtime_class("hv", uid=None), "gvisor"),
        CHANGE_OR_DELETE,
    ),
    "orphan-its-own": (
        "UPDATE",
        _without(_runtime_class(), "metadata", "ownerReferences"),
        _runtime_class(),
        CREATE_OR_WRITE,
    ),
}


@pytest.mark.parametrize(
    ("operation", "new", "old", "why"),
    RUNTIMECLASS_ATTACKS.values(),
    ids=RUNTIMECLASS_ATTACKS.keys(),
)
def test_a_stolen_operator_token_cannot_touch_other_runtime_classes(
    operation: str, new: Any, old: Any, why: str
) -> None:
    allowed, messages = runtime_class_guard(operation, new, old)
    assert not allowed
    assert any(why in m for m in messages), messages


def test_the_runtime_class_guard_leaves_the_garbage_collector_and_admins_alone() -> None:
    for user in (
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:kube-controller-manager",
        "kubernetes-admin",
        f"system:serviceaccount:{NAMESPACE}:{RELEASE}-agent",
    ):
        assert runtime_class_guard("DELETE", None, _someone_elses(), user=user) == (
            True,
            ["not matched"],
        )
    elsewhere = f"system:serviceaccount:windows-runtime:{RELEASE}-operator"
    assert not runtime_class_guard("DELETE", None, _someone_elses(), user=elsewhere)[0]


# ---- who writes the plan ----

PLAN_POLICY = f"{RELEASE}-plan-writers"
NAMESPACE_ADMIN = "jane@example.com"


def _plan(name: str = PLAN_CONFIGMAP) -> dict[str, Any]:
    body = plan_config_map(build_plan({}), NAMESPACE, paced=True)
    body["metadata"]["name"] = name
    return body


def plan_guard(
    operation: str,
    user: str,
    name: str = PLAN_CONFIGMAP,
    *,
    namespace: str = NAMESPACE,
    terminating: bool = False,
    policy: dict[str, Any] | None = None,
) -> tuple[bool, list[str]]:
    body = _plan(name)
    request = {
        "operation": operation,
        "namespace": namespace,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
    }
    namespace_object = {
        "metadata": {"name": namespace},
        "status": {"phase": "Terminating" if terminating else "Active"},
    }
    new, old = {
        "CREATE": (body, None),
        "UPDATE": (body, body),
        "DELETE": (None, body),
    }[operation]
    return evaluate_policy(policy or _policy(PLAN_POLICY), request, new, old, namespace_object)


@pytest.mark.parametrize("name", [PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_operator_writes_the_plan_and_the_rollout(name: str, operation: str) -> None:
    assert plan_guard(operation, OPERATOR_USER, name) == (True, [])


PLAN_FORGERS = {
    "namespace-admin": NAMESPACE_ADMIN,
    "agent": AGENT_USER,
    "a-pod-of-the-namespace": f"system:serviceaccount:{NAMESPACE}:default",
    "operator-of-another-namespace": f"system:serviceaccount:elsewhere:{RELEASE}-operator",
    "look-alike": f"system:serviceaccount:{NAMESPACE}:evil-{RELEASE}-operator",
}


@pytest.mark.parametrize("user", PLAN_FORGERS.values(), ids=PLAN_FORGERS.keys())
@pytest.mark.parametrize("name", [PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_nobody_else_may_write_or_delete_the_plan(user: str, name: str, operation: str) -> None:
    allowed, messages = plan_guard(operation, user, name)
    assert not allowed
    assert any("only the wcow operator's ServiceAccount" in m for m in messages), messages


def test_the_operator_may_create_no_other_config_map() -> None:
    allowed, messages = plan_guard("CREATE", OPERATOR_USER, "kube-root-ca.crt")
    assert not allowed
    assert any("may write only the ConfigMaps" in m for m in messages), messages


def test_other_config_maps_and_other_writers_are_not_matched() -> None:
    assert plan_guard("UPDATE", NAMESPACE_ADMIN, "settings") == (True, ["not matched"])
    assert plan_guard("DELETE", NAMESPACE_ADMIN, "settings") == (True, ["not matched"])


def test_anyone_may_delete_the_plan_of_a_namespace_being_deleted() -> None:
    """The namespace controller empties a Terminating namespace under its own identity."""
    controller = "system:serviceaccount:kube-system:namespace-controller"
    assert plan_guard("DELETE", controller, terminating=True) == (True, [])
    assert not plan_guard("UPDATE", controller, terminating=True)[0]
    assert not plan_guard("DELETE", controller)[0]


def test_plan_writers_lists_a_gitops_controller() -> None:
    argocd = "system:serviceaccount:argocd:argocd-application-controller"
    tricky = 'oidc:"quoted" \\ user'.replace(" ", "_")
    values = {"admissionPolicy": {"planWriters": [argocd, tricky]}}
    policy = find(render(values), "ValidatingAdmissionPolicy", PLAN_POLICY)
    for user in (argocd, tricky):
        assert plan_guard("UPDATE", user, policy=policy) == (True, [])
    assert not plan_guard("UPDATE", NAMESPACE_ADMIN, policy=policy)[0]
    assert not plan_guard("UPDATE", argocd)[0]  # by default: nobody but the operator


# ---- events (least privilege: RBAC grants create in every namespace) ----

EVENTS_POLICY = f"{RELEASE}-events"


def _event(kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
    api_version = "v1" if kind == "Node" else "runtime.wcow.dev/v1alpha1"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name},
        "reason": "CanaryPassed",
        "message": "m",
    }


def event_guard(
    user: str, event: dict[str, Any], node: str | None = None
) -> tuple[bool, list[str]]:
    user_info: dict[str, Any] = {"username": user}
    if node is not None:
        user_info["extra"] = {NODE_NAME_KEY: [node]}
    request = {
        "operation": "CREATE",
        "namespace": event["metadata"]["namespace"],
        "userInfo": user_info,
        "resource": {"group": "", "version": "v1", "resource": "events"},
    }
    return evaluate_policy(_policy(EVENTS_POLICY), request, event, None)


def test_the_agent_and_the_operator_post_their_events() -> None:
    assert event_guard(AGENT_USER, _event("Node", "win-1"), node="win-1") == (True, [])
    profile_event = _event("WindowsRuntimeProfile", "hv")
    assert event_guard(OPERATOR_USER, profile_event) == (True, [])


@pytest.mark.parametrize(
    ("user", "event", "node", "why"),
    [
        (AGENT_USER, _event("Node", "win-1", "tenant-a"), "win-1", "only in the namespace default"),
        (AGENT_USER, _event("Node", "win-2"), "win-1", "only about its own Node"),
        (AGENT_USER, _event("Node", "win-1"), None, "only about its own Node"),
        (AGENT_USER, _event("Pod", "web-0"), "win-1", "only about its own Node"),
        (OPERATOR_USER, _event("Pod", "web-0", "tenant-a"), None, "only in the namespace"),
        (OPERATOR_USER, _event("Node", "win-1"), None, "the operator only about"),
    ],
    ids=[
        "agent-elsewhere",
        "agent-other-node",
        "agent-token-without-node",
        "agent-about-a-pod",
        "operator-on-a-tenants-pod",
        "operator-on-a-node",
    ],
)
def test_neither_posts_events_elsewhere(
    user: str, event: dict[str, Any], node: str | None, why: str
) -> None:
    allowed, messages = event_guard(user, event, node)
    assert not allowed
    assert any(why in m for m in messages), messages


def test_the_events_guard_leaves_others_alone() -> None:
    event = _event("Pod", "web-0", "tenant-a")
    assert event_guard("system:node:win-1", event) == (True, ["not matched"])


# ---- the operator's profiles (a stolen token may not rewrite them) ----

PROFILE_POLICY = f"{RELEASE}-operator-profile-guard"
FOREIGN_FINALIZER = "example.com/hold"


def _stored_profile() -> dict[str, Any]:
    """A profile as the API server stores it: others' labels, annotations and finalizer, the
    fields the server sets, and a status."""
    document = profile_document("hv", vm={"processorCount": 2, "memoryMB": 4096})
    document["metadata"].update(
        uid="5e1f-uid",
        resourceVersion="4711",
        generation=3,
        creationTimestamp="2026-03-01T00:00:00Z",
        labels={"team": "windows"},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        finalizers=[FOREIGN_FINALIZER],
        managedFields=[{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1"}],
    )
    document["status"] = {"observedGeneration": 3}
    return document


class _RecordingApi(FakeApi):
    """The controller's fake API, keeping each profile patch as admission sees it: the stored
    profile before and after."""

    def __init__(self) -> None:
        super().__init__()
        self.profile_updates: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def patch_profile(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        before = copy.deepcopy(self.profiles[name])
        patched = super().patch_profile(name, patch)
        self.profile_updates.append((before, copy.deepcopy(self.profiles.get(name, patched))))
        return patched


def profile_guard(
    new: dict[str, Any], old: dict[str, Any], user: str = OPERATOR_USER
) -> tuple[bool, list[str]]:
    request = {
        "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["system:serviceaccounts"]},
        "resource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
    }
    return evaluate_policy(_policy(PROFILE_POLICY), request, new, old)


def _finalizers(profile: dict[str, Any]) -> list[str]:
    return list(profile["metadata"].get("finalizers") or [])


def test_the_operator_may_remove_the_earlier_finalizer_and_adds_none() -> None:
    """What the real controller sends (a merge patch of metadata.finalizers) when a profile
    left with the finalizer of earlier versions is deleted passes, and keeps the other
    finalizer; a live profile gets no finalizer, and a stolen token cannot add one (it
    would hold profiles from deletion)."""
    api = _RecordingApi()
    legacy = _stored_profile()
    legacy["metadata"]["finalizers"] = [FOREIGN_FINALIZER, FINALIZER]
    api.apply_profile(legacy)
    controller = Controller(
        api, RelistingCache(api, NAMESPACE), ReconcileSettings(namespace=NAMESPACE), Metrics()
    )
    controller.run_pass()
    assert api.profile_updates == [], "nothing added to a live profile"
    api.delete_profile("hv")
    controller.run_pass()
    assert [(_finalizers(old), _finalizers(new)) for old, new in api.profile_updates] == [
        ([FOREIGN_FINALIZER, FINALIZER], [FOREIGN_FINALIZER]),
    ]
    for old, new in api.profile_updates:
        assert profile_guard(new, old) == (True, [])
    added = _edited(metadata__finalizers=[FOREIGN_FINALIZER, FINALIZER])
    allowed, messages = profile_guard(added, _stored_profile())
    assert not allowed
    assert messages[0].endswith("not change its finalizers (it adds none)")


def test_what_the_server_sets_is_not_compared() -> None:
    old = _with_ours(_stored_profile())  # a profile left with the earlier finalizer
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = [FINALIZER, FOREIGN_FINALIZER]  # at the front, too
    new["metadata"]["managedFields"].append(
        {"manager": "wcow-operator", "operation": "Update", "fieldsType": "FieldsV1"}
    )
    new["metadata"]["resourceVersion"] = "4712"
    assert profile_guard(new, old) == (True, [])
    assert profile_guard(old, new) == (True, [])


def _edited(**edits: Any) -> dict[str, Any]:
    """The stored profile with ``edits`` (``metadata__labels=...``: a path; None removes)."""
    return changed(_stored_profile(), **edits)


def _with_ours(profile: dict[str, Any]) -> dict[str, Any]:
    profile["metadata"]["finalizers"] = [*_finalizers(profile), FINALIZER]
    return profile


_ANNOTATIONS = _stored_profile()["metadata"]["annotations"]
PROFILE_ATTACKS: dict[str, tuple[dict[str, Any], str]] = {
    # (the profile after the request, what the refusal names)
    "largest-vm": (_edited(spec__vm={"maxProcessorCount": 240, "maxMemoryMB": 1048576}), "spec"),
    "spec-with-the-finalizer": (
        _with_ours(_edited(spec__handler="runhcs-wcow-hypervisor")),
        "spec, finalizers (it adds none)",
    ),
    "rollout-all-at-once": (_edited(spec__rollout={"maxUnavailable": "100%"}), "spec"),
    "resume-a-halted-rollout": (
        _edited(metadata__annotations={**_ANNOTATIONS, RESUME_ANNOTATION: "1767225600"}),
        "annotations",
    ),
    "drop-annotations": (_edited(metadata__annotations=None), "annotations"),
    "relabel": (_edited(metadata__labels={"team": "someone-else"}), "labels"),
    "add-a-label": (
        _edited(metadata__labels={"team": "windows", "runtime.wcow.dev/x": "y"}),
        "labels",
    ),
    "owner": (
        _edited(
            metadata__ownerReferences=[
                {"apiVersion": "v1", "kind": "Namespace", "name": "tenant-a", "uid": "u"}
            ]
        ),
        "ownerReferences",
    ),
    "another-finalizer": (
        _edited(metadata__finalizers=[FOREIGN_FINALIZER, "example.com/never"]),
        "other finalizers",
    ),
    "drop-someone-elses-finalizer": (
        _edited(metadata__finalizers=[FINALIZER]),
        "other finalizers, finalizers (it adds none)",
    ),
}


@pytest.mark.parametrize(("new", "what"), PROFILE_ATTACKS.values(), ids=PROFILE_ATTACKS.keys())
def test_a_stolen_operator_token_cannot_rewrite_profiles(new: dict[str, Any], what: str) -> None:
    allowed, messages = profile_guard(new, _stored_profile())
    assert not allowed
    assert messages == [
        f"the wcow operator may only remove its finalizer {FINALIZER} from a "
        f"WindowsRuntimeProfile, not change its {what}"
    ]


def test_the_profile_guard_names_every_change() -> None:
    new = _edited(spec__handler="x", metadata__labels=None, metadata__annotations=None)
    assert profile_guard(new, _stored_profile())[1][0].endswith("spec, labels, annotations")


def test_the_profile_guard_leaves_admins_and_authors_alone() -> None:
    new, old = PROFILE_ATTACKS["largest-vm"][0], _stored_profile()
    for user in (
        "kubernetes-admin",
        "system:serviceaccount:argocd:argocd-application-controller",
        AGENT_USER,
        f"system:serviceaccount:{NAMESPACE}:evil-{RELEASE}-operator",
    ):
        assert profile_guard(new, old, user=user) == (True, ["not matched"])
    elsewhere = f"system:serviceaccount:windows-runtime:{RELEASE}-operator"
    assert not profile_guard(new, old, user=elsewhere)[0]


def test_the_profile_guard_sees_profile_updates_only() -> None:
    """UPDATE of the main resource: the status subresource (update-status) is not matched."""
    objects = render()
    policy = find(objects, "ValidatingAdmissionPolicy", PROFILE_POLICY)
    binding = find(objects, "ValidatingAdmissionPolicyBinding", PROFILE_POLICY)
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == PROFILE_POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": [PLURAL],
        }
    ]
