"""The Mutating- and ValidatingWebhookConfiguration of the pod admission webhook.

The mutating webhook sees pod CREATE (it sizes the VM); the validating one sees CREATE and
UPDATE: the kubelet reads the VM annotations whenever it creates the pod's sandbox, so they
must not change after admission (webhook.decide.admit_update). Both rules match the pods
resource, and the validating one also pods/ephemeralcontainers (no other subresource: status
updates never reach the webhook). A chart guard
(ValidatingAdmissionPolicy) pins exactly these rules, so change them together.

Safety first: the API server calls the webhook only for pods whose runtimeClassName is one of
the profiles' RuntimeClasses (matchConditions, GA in Kubernetes 1.30), never in kube-system or
the operator's own namespace (namespaceSelector). Only for those pods is failurePolicy Fail:
a pod of a wcow class admitted unchecked while the webhook is down could get a utility VM
smaller than its limits or larger than the platform team allows, so it waits instead. Pods
of any other class, and pods without one, never reach the webhook, so its being down cannot
block them.

matchConditions (k8s.io/apiserver features: AdmissionWebhookMatchConditions, beta and on by
default in 1.28 and 1.29, GA and locked on from 1.30) are dropped by an API server with the
gate off: then every pod CREATE and UPDATE outside the excluded namespaces reaches the
webhook. The handlers pass pods of other classes at once, but while no replica answers,
failurePolicy Fail blocks their creation and update too (label and finalizer changes
included); the keeper logs an error when it sees the conditions dropped.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from cryptography import x509

WEBHOOK_CONFIGURATION: Final = "wcow-runtime-pod-admission"
KINDS: Final = ("mutating", "validating")
MUTATE_ID: Final = "mutate-pods"
VALIDATE_ID: Final = "validate-pods"
WEBHOOK_NAME_SUFFIX: Final = "pods.runtime.wcow.dev"
OPERATIONS: Final = {"mutating": ("CREATE",), "validating": ("CREATE", "UPDATE")}
# The validating webhook also sees ephemeral containers added to a pod (``kubectl debug``: an
# UPDATE of pods/ephemeralcontainers), which run in the pod's sandbox like its other containers.
RESOURCES: Final = {"mutating": ("pods",), "validating": ("pods", "pods/ephemeralcontainers")}
TIMEOUT_SECONDS: Final = 5
PEM_END: Final = "-----END CERTIFICATE-----"
MAX_CAS: Final = 16  # replicas' CAs kept in the bundle (each replica serves with its own)


@dataclass(frozen=True)
class OwnerReference:
    """The ClusterRole that grants the webhook permissions owns both configurations: when
    ``helm uninstall`` (or ``kubectl delete -k``) removes it, the garbage collector removes
    them, so no configuration outlives the operator that answers it."""

    api_version: str
    kind: str
    name: str
    uid: str

    def as_dict(self) -> dict[str, str]:
        # No blockOwnerDeletion: setting it would need update on the owner's finalizers.
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass(frozen=True)
class Endpoint:
    """Where the API server reaches the webhook: a Service in the cluster, or a URL."""

    url: str | None = None
    service_namespace: str | None = None
    service_name: str | None = None
    service_port: int = 443

    def client_config(self, path: str, ca_bundle: str | None) -> dict[str, Any]:
        config: dict[str, Any]
        if self.url is not None:
            config = {"url": f"{self.url.rstrip('/')}/{path}"}
        else:
            config = {
                "service": {
                    "namespace": self.service_namespace,
                    "name": self.service_name,
                    "port": self.service_port,
                    "path": f"/{path}",
                }
            }
        if ca_bundle:
            config["caBundle"] = ca_bundle
        return config


def match_condition(runtime_classes: Iterable[str]) -> dict[str, str]:
    """Only pods of the profiles' classes reach the webhook; with no profile, none do."""
    names = sorted(set(runtime_classes))
    if not names:
        return {"name": "wcow-runtime-class", "expression": "false"}
    listed = ", ".join(json.dumps(name) for name in names)  # names are DNS subdomains
    return {
        "name": "wcow-runtime-class",
        "expression": f"has(object.spec.runtimeClassName) && "
        f"object.spec.runtimeClassName in [{listed}]",
    }


def webhook(
    kind: str, endpoint: Endpoint, runtime_classes: Iterable[str], excluded: Iterable[str],
    ca_bundle: str | None,
) -> dict[str, Any]:  # fmt: skip
    path = MUTATE_ID if kind == "mutating" else VALIDATE_ID
    body: dict[str, Any] = {
        "name": f"{path.split('-')[0]}.{WEBHOOK_NAME_SUFFIX}",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "clientConfig": endpoint.client_config(path, ca_bundle),
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": list(RESOURCES[kind]),
                "operations": list(OPERATIONS[kind]),
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": sorted(set(excluded)),
                }
            ]
        },
        "objectSelector": {},
        "matchConditions": [match_condition(runtime_classes)],
    }
    if kind == "mutating":
        body["reinvocationPolicy"] = "Never"  # the validating webhook sees the final pod
    return body


def webhook_configuration(
    kind: str,
    endpoint: Endpoint,
    runtime_classes: Iterable[str],
    excluded_namespaces: Iterable[str],
    *,
    ca_bundle: str | None,
    annotations: dict[str, str] | None = None,
    owner: OwnerReference | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": WEBHOOK_CONFIGURATION,
        "labels": {
            "app.kubernetes.io/managed-by": "wcow-operator",
            "app.kubernetes.io/part-of": "wcow-runtime",
        },
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner.as_dict()]
    names = list(runtime_classes)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration"
        if kind == "mutating"
        else "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [webhook(kind, endpoint, names, excluded_namespaces, ca_bundle)],
    }


def _pems(bundle_b64: str | None) -> list[str]:
    if not bundle_b64:
        return []
    try:
        text = base64.b64decode(bundle_b64).decode("ascii")
    except ValueError:
        return []
    return [
        f"{part.strip()}\n{PEM_END}\n"
        for part in text.split(PEM_END)
        if "-----BEGIN CERTIFICATE-----" in part
    ]


def merged_ca_bundle(current_b64: str | None, own_pem: str) -> str:
    """The CA bundle with this replica's CA in it: added first when missing, the others
    after it, newest first, at most MAX_CAS. Each replica signs its serving certificate with
    a CA of its own that never leaves its memory, so the API server trusts whichever
    replica the Service picks."""
    own = own_pem.strip() + "\n"
    current = _pems(current_b64)
    if any(pem.strip() == own.strip() for pem in current):
        bundle = current  # ours is in: keep the order, or replicas would take turns rewriting
    else:
        # A CA of the same name is this pod's from before a restart: its process is gone.
        subject = _subject(own)
        others = [pem for pem in current if subject is None or _subject(pem) != subject]
        bundle = [own, *others][:MAX_CAS]
    return base64.b64encode("".join(bundle).encode("ascii")).decode("ascii")


def _subject(pem: str) -> str | None:
    try:
        return x509.load_pem_x509_certificate(pem.encode("ascii")).subject.rfc4514_string()
    except ValueError:
        return None


def bundle_trusts(bundle_b64: str | None, ca_pem: str) -> bool:
    """Whether a caBundle holds ``ca_pem``."""
    return any(pem.strip() == ca_pem.strip() for pem in _pems(bundle_b64))


def ca_bundle_of(configuration: dict[str, Any] | None) -> str | None:
    """The caBundle the (first) webhook of a configuration carries now."""
    hooks = (configuration or {}).get("webhooks") or []
    if not hooks:
        return None
    bundle = (hooks[0].get("clientConfig") or {}).get("caBundle")
    return bundle if isinstance(bundle, str) else None
