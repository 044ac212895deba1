"""``kubectl wcow verify``: per profile, one pod of its RuntimeClass, watched until it runs
or says why not, then deleted (the decisions are in ``plugin.verify``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.plugin import verify
from wcow_operator.plugin.verify import Result

POLL_SECONDS = 2.0


class Prober(Protocol):
    """What a check needs of the cluster (``k8s.prober.PodProber``)."""

    def profiles(self) -> list[dict[str, Any]]: ...
    def windows_nodes(
        self, name: str | None = None, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]: ...
    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete_pod(self, namespace: str, name: str) -> None: ...


def run(
    prober: Prober,
    namespace: str,
    image: str,
    deadline_seconds: int,
    names: Sequence[str] = (),
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Result]:
    checks = verify.checks(prober.profiles(), prober.windows_nodes(metadata_only=True), names)
    results = [
        Result(name, "failed", "no WindowsRuntimeProfile of that name")
        for name in sorted(set(names) - {c.profile for c in checks})
    ]
    nonce = uuid.uuid4().hex
    for check in checks:
        if check.skipped:
            results.append(Result(check.profile, "skipped", check.skipped))
            continue
        pod = verify.probe_pod(check, verify.pod_name(check, nonce), image, deadline_seconds)
        results.append(
            _one(
                prober,
                namespace,
                check,
                pod=pod,
                deadline=deadline_seconds,
                clock=clock,
                sleep=sleep,
            )
        )
    return results


def _one(
    prober: Prober,
    namespace: str,
    check: verify.Check,
    *,
    pod: dict[str, Any],
    deadline: int,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> Result:
    name = str(pod["metadata"]["name"])
    try:
        prober.create_pod(namespace, pod)
    except ApiError as error:  # refused: RBAC, Pod Security, the admission webhook ...
        return Result(check.profile, "failed", f"the check pod was refused: {error}")
    try:
        end = clock() + deadline
        seen: dict[str, Any] | None = None
        while clock() < end:
            seen = prober.read_pod(namespace, name)
            said = verify.verdict(seen)
            if said is not None:
                return Result(check.profile, *said)
            sleep(POLL_SECONDS)
        return Result(check.profile, "failed", verify.pending_why(seen, deadline))
    finally:
        prober.delete_pod(namespace, name)


def render(results: Sequence[Result]) -> str:
    words = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}
    return "".join(f"{words[r.outcome]}  {r.profile}: {r.why}\n" for r in results)
