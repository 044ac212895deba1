"""The node self-patch policy, evaluated with cel-python on admission requests like the ones
the API server builds: the agent may change only its own Node, and there only
runtime.wcow.dev/* labels and annotations. (The e2e tests check the real API server.)"""

from __future__ import annotations

import copy
import functools
from typing import Any

import celpy
import pytest
from deploy.generate import NAMESPACE, RELEASE

from tests.delivery.helpers import find, render
from wcow_operator.api.agent_status import AGENT_STATUS_ANNOTATION

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
    return evaluate_policy(_policy(), "UPDATE", user_info, new, old)


def evaluate_policy(
    policy: dict[str, Any],
    operation: str,
    user_info: dict[str, Any],
    new: dict[str, Any],
    old: dict[str, Any] | None,
) -> tuple[bool, list[str]]:
    """(allowed, messages): ``policy`` evaluated as the API server does, with cel-python."""
    spec = policy["spec"]
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel({"operation": operation, "userInfo": user_info}),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }

    def evaluate(expression: str) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    if not all(bool(evaluate(c["expression"])) for c in spec["matchConditions"]):
        return True, ["not matched"]
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.json_to_cel({}) if not variables else _as_cel(variables)
        variables[variable["name"]] = evaluate(variable["expression"])
    activation["variables"] = _as_cel(variables)
    failed = [
        v.get("message") or v["messageExpression"]
        for v in spec["validations"]
        if not bool(evaluate(v["expression"]))
    ]
    return not failed, failed


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


def _configuration(kind: str = "mutating", **changes: Any) -> dict[str, Any]:
    """What the operator writes (render.webhooks), with ``changes`` to its webhook."""
    from wcow_operator.render.webhooks import Endpoint, webhook_configuration

    body = webhook_configuration(
        kind,
        Endpoint(service_namespace=NAMESPACE, service_name=f"{RELEASE}-operator-webhook"),
        ["hv"],
        ["kube-system", NAMESPACE],
        ca_bundle=None,
    )
    body["webhooks"][0].update(changes)
    return body


def guard(body: dict[str, Any], user: str = OPERATOR_USER) -> tuple[bool, list[str]]:
    user_info = {"username": user, "groups": ["system:serviceaccounts"]}
    return evaluate_policy(_policy(OPERATOR_POLICY), "CREATE", user_info, body, None)


def test_the_operator_may_write_its_own_webhook_configuration() -> None:
    assert guard(_configuration()) == (True, [])
    assert guard(_configuration("validating")) == (True, [])  # pods CREATE and UPDATE


def test_only_the_validating_webhook_may_see_pod_updates() -> None:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}  # fmt: skip
    allowed, messages = guard(_configuration("mutating", rules=[rule]))
    assert not allowed
    assert any("only the creation of pods" in m for m in messages), messages
    for operations in (["CREATE", "UPDATE", "DELETE"], ["*"], ["UPDATE"]):
        body = _configuration("validating", rules=[{**rule, "operations": operations}])
        assert not guard(body)[0], operations


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"metadata": {"name": "intercept-everything"}}, "only the webhook configuration"),
        ({"clientConfig": {"url": "https://attacker.example.com/"}}, "only its own webhook"),
        (
            {"clientConfig": {"service": {"namespace": "default", "name": "evil", "port": 443}}},
            "only its own webhook",
        ),
        (
            {
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["secrets"],
                        "operations": ["CREATE"],
                        "scope": "*",
                    }
                ]
            },
            "only the creation of pods",
        ),
        (
            {
                "rules": [
                    {
                        "apiGroups": ["*"],
                        "apiVersions": ["*"],
                        "resources": ["*"],
                        "operations": ["*"],
                        "scope": "*",
                    }
                ]
            },
            "only the creation of pods",
        ),
    ],
    ids=["other-name", "url", "other-service", "secrets", "everything"],
)
def test_a_stolen_operator_token_cannot_register_another_webhook(
    change: dict[str, Any], why: str
) -> None:
    body = _configuration()
    if "metadata" in change:
        body["metadata"].update(change["metadata"])
    else:
        body["webhooks"][0].update(change)
    allowed, messages = guard(body)
    assert not allowed
    assert any(why in m for m in messages), messages


def test_the_guard_only_restricts_the_operator() -> None:
    body = _configuration(clientConfig={"url": "https://other.example.com/"})
    body["metadata"]["name"] = "someone-elses"
    assert guard(body, user="system:serviceaccount:kube-system:other-operator")[0]
    moved = f"system:serviceaccount:windows-runtime:{RELEASE}-operator"
    assert not guard(_configuration(), user=moved)[0]  # its Service is in wcow-system
