"""``kubectl wcow verify`` (and the chart's ``helm test``), decided: which profiles can be
checked, the pod that checks one, and what the pod's status says (no API calls).

A check is one pod of the profile's RuntimeClass: the RuntimeClass's scheduling sends it to a
node whose agent proved the handler (the ready label), so it runs there or says why not. A
profile with no ready node is skipped with the reason, not failed: a cluster without Windows
nodes yet is not broken.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from wcow_contract.labels import READY_VALUE, ready_label
from wcow_contract.text import printable

Outcome = Literal["passed", "failed", "skipped"]
# Container waiting reasons that will not resolve by waiting (kubelet's own reasons).
STUCK: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerError",
     "CreateContainerConfigError", "RunContainerError", "CrashLoopBackOff"}
)  # fmt: skip
LABEL: Final = "app.kubernetes.io/component"
LABEL_VALUE: Final = "wcow-verify"


@dataclass(frozen=True)
class Check:
    profile: str
    runtime_class: str
    handler: str
    ready_nodes: tuple[str, ...]

    @property
    def skipped(self) -> str | None:
        """Why this profile cannot be checked now, None when it can."""
        if not self.ready_nodes:
            return (
                f"no node is ready for handler {self.handler} (no Node has the label "
                f"{ready_label(self.handler)}={READY_VALUE}): skipped"
            )
        return None


@dataclass(frozen=True)
class Result:
    profile: str
    outcome: Outcome
    why: str


def checks(
    profiles: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    names: Sequence[str] = (),
) -> list[Check]:
    """One check per profile (those named, or all), with the nodes ready for its handler."""
    found = []
    for profile in profiles:
        name = str((profile.get("metadata") or {}).get("name", ""))
        if names and name not in names:
            continue
        status = profile.get("status") or {}
        handler = str(status.get("handler") or (profile.get("spec") or {}).get("handler") or name)
        label = ready_label(handler)
        ready = tuple(
            sorted(
                str((n.get("metadata") or {}).get("name"))
                for n in nodes
                if ((n.get("metadata") or {}).get("labels") or {}).get(label) == READY_VALUE
            )
        )
        runtime_class = str(status.get("runtimeClassName") or name)
        found.append(Check(name, runtime_class, handler, ready))
    return sorted(found, key=lambda c: c.profile)


def pod_name(check: Check, nonce: str) -> str:
    """``wcow-verify-<profile>-<hash>``, a valid Pod name for any profile name."""
    digest = hashlib.sha256(f"{check.profile}/{nonce}".encode()).hexdigest()[:8]
    return f"wcow-verify-{check.profile[:40].rstrip('-.')}-{digest}"


def probe_pod(check: Check, name: str, image: str, deadline_seconds: int) -> dict[str, Any]:
    """The pod that checks ``check``: its RuntimeClass (which brings the ready-label
    selector, the Windows tolerations and the overhead), one container of ``image``, no
    token, no restarts, gone after ``deadline_seconds`` whatever happens."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL: LABEL_VALUE}},
        "spec": {
            "runtimeClassName": check.runtime_class,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": deadline_seconds,
            "containers": [{"name": "check", "image": image}],
        },
    }


def verdict(pod: Mapping[str, Any] | None) -> tuple[Outcome, str] | None:
    """What the pod's status says: passed (a container runs, or all exited 0), failed (with
    the kubelet's reason), or None while it may still start."""
    if pod is None:
        return "failed", "the check pod is gone"
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    containers = status.get("containerStatuses") or []
    phase = status.get("phase")
    if phase == "Succeeded" or any("running" in (c.get("state") or {}) for c in containers):
        return "passed", f"a pod of the class ran on {node}"
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK:
            return "failed", _said(f"on {node}: {waiting['reason']}: {waiting.get('message', '')}")
        ended = (container.get("state") or {}).get("terminated") or {}
        if ended and ended.get("exitCode") != 0:
            return "failed", _said(
                f"on {node}: exited {ended.get('exitCode')}: {ended.get('reason', '')}"
            )
    if phase == "Failed":
        return "failed", _said(f"{status.get('reason', 'Failed')}: {status.get('message', '')}")
    return None


def pending_why(pod: Mapping[str, Any] | None, seconds: int) -> str:
    """Why a pod that never started did not, at the deadline."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    unscheduled = next(
        (c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "False"),
        None,
    )
    if unscheduled:
        return _said(f"not scheduled within {seconds} s: {unscheduled.get('message', '')}")
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    where = f"on {node}" if node else "(no node took it)"
    return f"did not start within {seconds} s {where}"


def _said(text: str) -> str:
    return printable(text, 512)
