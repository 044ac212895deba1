"""RBAC as code: the exact rules the operator and the node agent need, and nothing more.

The Helm chart, the kustomize base and the tests consume these lists; a test fails when the
operator's Kubernetes adapter calls an API that is not allowed here.
"""

from __future__ import annotations

from typing import Any, Final

from wcow_contract.v1alpha1 import GROUP, PLURAL
from wcow_contract.wire.plan import PLAN_CONFIGMAP
from wcow_contract.wire.rollout import ROLLOUT_CONFIGMAP
from wcow_operator.render.webhooks import WEBHOOK_CONFIGURATION

OPERATOR_LEASE = "wcow-operator"

Rule = dict[str, Any]

# Cluster-wide, for the operator: its profiles (finalizers; status), the RuntimeClasses it
# owns, Windows Nodes it watches (metadata: agent reports, ready labels), and the CRDs kopf
# follows.
OPERATOR_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["update"]},
    # RuntimeClasses carry blockOwnerDeletion: clusters that enforce owner-reference
    # permissions (OwnerReferencesPermissionEnforcement) require update on finalizers.
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    {
        "apiGroups": ["node.k8s.io"],
        "resources": ["runtimeclasses"],
        "verbs": ["list", "watch", "create", "update", "delete"],
    },
    # Nodes: watched (metadata); get and patch only to cordon and uncordon before a restart
    # (spec.rollout.drain; a ValidatingAdmissionPolicy holds the patch to spec.unschedulable
    # and the operator's own runtime.wcow.dev/cordoned-by annotation).
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch", "get", "patch"]},
    # Events about cluster-scoped objects must be in "default"; create only.
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
]

# Cluster-wide, only where drain Evict is allowed (`--allow-evict`; the chart's
# operator.allowEvict, or operator.drain Evict), in a ClusterRole of its own: the pods bound
# to a draining node (a field-selected list: RBAC cannot narrow list to a node, so this reads
# every pod, their inline env values included) and their eviction (policy/v1, so
# PodDisruptionBudgets are honoured; never a delete). Without it the token reads no pod.
OPERATOR_EVICT_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
]

# Cluster-wide, for `wcow-operator uninstall` (the chart's pre-delete hook), bound to the
# operator's ServiceAccount only while the hook runs: delete the profiles. The rest it does
# with the operator's own rules (list profiles and Nodes, list and update the plan by name).
UNINSTALL_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["delete"]},
]

# Cluster-wide, only with the pod admission webhook, in a ClusterRole of its own: the
# webhook's configurations, created when absent (create cannot be narrowed by name), then read
# and kept current (runtime classes, CA bundle) by name. That ClusterRole owns them, so they go
# when it goes (operator_webhook_rules adds the read of it, by its deploy-time name).
OPERATOR_WEBHOOK_RULES: Final[list[Rule]] = [
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "verbs": ["create"],
    },
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "resourceNames": [WEBHOOK_CONFIGURATION],
        "verbs": ["get", "update"],
    },
]


def operator_webhook_rules(cluster_role: str) -> list[Rule]:
    """The webhook ClusterRole's rules, given its own name (the owner of the configurations)."""
    return [
        *OPERATOR_WEBHOOK_RULES,
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "resourceNames": [cluster_role],
            "verbs": ["get"],
        },
    ]


def registry_secret_rules(secret: str) -> list[Rule]:
    """With image checks and a registry Secret (chart values admission.images.*): read that
    one Secret, by name, in the operator's namespace (``k8s.secrets.RegistrySecret``)."""
    return [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret],
             "verbs": ["get"]}]  # fmt: skip


# In the operator's namespace only: the plan ConfigMap and the leader Lease (by name, except
# create, which RBAC cannot restrict by name; the plan's watch selects it with fieldSelector
# metadata.name, which lets RBAC apply resourceNames to list and watch).
OPERATOR_NAMESPACE_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP],
        "verbs": ["list", "watch", "update"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [OPERATOR_LEASE],
        "verbs": ["get", "update"],
    },
]

# Cluster-wide, for the node agent: its own Node (a ValidatingAdmissionPolicy narrows patch
# to the agent's own Node and runtime.wcow.dev/* keys) and events.
AGENT_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},  # Node events: "default"
]

# In the operator's namespace: read and watch the plan and rollout ConfigMaps, by name (the
# agent's watches select them with fieldSelector metadata.name, which lets RBAC apply
# resourceNames).
AGENT_NAMESPACE_RULES: Final[list[Rule]] = [
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP],
        "verbs": ["get", "list", "watch"],
    },
]


# `kubectl wcow status` and `diagnose` (wcow_operator.plugin), for a read-only person: the
# chart's ClusterRole and Role "<fullname>-viewer". Reads only: no write verb, no Secret, and
# the webhook configurations and ConfigMaps only by name. Not aggregated to the built-in
# "view" role: Nodes, RuntimeClasses and webhook configurations are cluster-scoped, and "view"
# (bound cluster-wide by many) deliberately grants no cluster-scoped read.
VIEWER_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list"]},
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
    # Events about profiles and Nodes are in "default" (cluster-scoped objects).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "resourceNames": [WEBHOOK_CONFIGURATION],
        "verbs": ["get"],
    },
]

# In the operator's namespace: the plan and rollout by name, the Lease, and the operator's
# and agents' pods with their logs (pods/log also serves ?previous=true).
VIEWER_NAMESPACE_RULES: Final[list[Rule]] = [
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [PLAN_CONFIGMAP, ROLLOUT_CONFIGMAP],
        "verbs": ["get"],
    },
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [OPERATOR_LEASE],
        "verbs": ["get"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]


# `kubectl wcow verify` and the chart's `helm test` (its ServiceAccount, only while the test
# runs): read profiles and Windows Nodes; in one namespace, create, watch and delete its
# check pods (create cannot be narrowed by name).
VERIFY_CLUSTER_RULES: Final[list[Rule]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
]
VERIFY_NAMESPACE_RULES: Final[list[Rule]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
]


def allows(
    rules: list[Rule], group: str, resource: str, verb: str, name: str | None = None
) -> bool:
    """Whether ``rules`` grant ``verb`` on ``group``/``resource`` (object ``name``, if the
    call names one: a rule with resourceNames grants only those)."""
    return any(
        group in rule["apiGroups"]
        and resource in rule["resources"]
        and verb in rule["verbs"]
        and ("resourceNames" not in rule or name in rule["resourceNames"])
        for rule in rules
    )
