"""RBAC as code: the exact rules the operator and the node agent need, and nothing more.

The Helm chart, the kustomize base and the tests consume these lists; a test fails when the
operator's Kubernetes adapter calls an API that is not allowed here.
"""

from __future__ import annotations

from typing import Any, Final

from wcow_operator.api.v1alpha1 import GROUP, PLURAL

Rule = dict[str, Any]

# Cluster-wide, for the operator: its profiles, the RuntimeClasses it owns, Nodes it reads
# (agent status and ready labels), events, and what kopf needs to follow CRDs.
OPERATOR_CLUSTER_RULES: Final[list[Rule]] = [
    {
        "apiGroups": [GROUP],
        "resources": [PLURAL],
        "verbs": ["get", "list", "watch", "patch", "update"],
    },
    {
        "apiGroups": [GROUP],
        "resources": [f"{PLURAL}/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["node.k8s.io"],
        "resources": ["runtimeclasses"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
]

# In the operator's namespace only: the plan ConfigMap and the leader-election Lease.
OPERATOR_NAMESPACE_RULES: Final[list[Rule]] = [
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch", "update"],
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "patch", "update"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]

# Cluster-wide, for the node agent: its own Node (a ValidatingAdmissionPolicy narrows patch
# to the agent's own Node and runtime.wcow.dev/* keys) and events.
AGENT_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]

# In the operator's namespace: read the plan ConfigMap.
AGENT_NAMESPACE_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
]


def allows(rules: list[Rule], group: str, resource: str, verb: str) -> bool:
    """Whether ``rules`` grant ``verb`` on ``group``/``resource``."""
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )
