"""``wcow-operator uninstall``: leave no node with the agents' tables, pause image setting,
labels or annotations before the operator and the agents are deleted. The chart runs it as a
``pre-delete`` hook (``helm uninstall`` only, never ``helm upgrade``); without Helm, run the
Job of ``deploy/uninstall/`` before ``kubectl delete -k deploy/``.

1. Delete every profile, wait until they are gone and the operator has written the plan
   without them, and delete the RuntimeClasses they controlled (the garbage collector cannot
   once the CRD is gone).
2. Signal the agents: ``runtime.wcow.dev/uninstall`` on the plan ConfigMap. Each agent
   removes its tables, puts the pause image key back, restarts containerd once, deletes its
   files, then removes its labels and annotations from its Node. All nodes at once: a paced
   removal would take waves of the rollout, and nothing of the classes is left to protect.
3. Wait, bounded, until no Windows Node carries an agent-written key; then take the signal
   off again (a later install starts clean). Exit 1 naming the nodes that are not clean, so
   ``helm uninstall`` fails and says so; the signal stays, so their agents clean up when
   they come back.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.k8s.reader import kubeconfig_client
from wcow_operator.k8s.uninstall_api import UninstallApi
from wcow_operator.reconcile.uninstall_decisions import (
    not_clean,
    owned_runtime_classes,
    plan_handlers,
    report,
    signal_of,
    with_signal,
)
from wcow_operator.settings import SettingsError, _namespace

POLL_SECONDS: Final = 2.0
MAX_TIMEOUT: Final = 3600
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Deadline:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.end = clock() + seconds

    def left(self) -> float:
        return self.end - self.clock()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wcow-operator uninstall",
        description="Delete every WindowsRuntimeProfile, have every node agent remove its "
        "tables, pause image setting, labels and annotations, and wait until every Windows "
        "node is clean. Exit 1 naming the nodes that are not, when the time is up.",
    )
    parser.add_argument("--namespace", help="the operator's namespace (the plan ConfigMap's)")
    parser.add_argument(
        "--timeout",
        type=int,
        default=240,
        metavar="SECONDS",
        help=f"how long to wait in all, 10 to {MAX_TIMEOUT} (default 240: under Helm's 5m)",
    )
    parser.add_argument("--kubeconfig", help="default: in a pod its ServiceAccount, else kubectl's")
    return parser


def main(argv: Sequence[str], sleep: Callable[[float], None] = time.sleep) -> int:
    args = parser().parse_args(argv)
    if not 10 <= args.timeout <= MAX_TIMEOUT:
        print(f"error: --timeout must be 10 to {MAX_TIMEOUT} seconds, not {args.timeout}")
        return EXIT_USAGE
    try:
        namespace = _namespace(args, os.environ)
        api = UninstallApi(kubeconfig_client(args.kubeconfig, None))
        return Uninstall(api, namespace, Deadline(args.timeout), sleep).run()
    except (SettingsError, ApiError) as error:
        print(f"error: {error}", flush=True)
        return EXIT_FAILED


class Uninstall:
    def __init__(
        self, api: UninstallApi, namespace: str, deadline: Deadline, sleep: Callable[[float], None]
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.deadline = deadline
        self.sleep = sleep

    def say(self, text: str) -> None:
        print(text, flush=True)  # the hook Job's log: what `kubectl logs` shows

    def run(self) -> int:
        if not self.delete_profiles() or not self.signal():
            return EXIT_FAILED
        self.delete_runtime_classes()
        total, left = self.wait_clean()
        if left:
            for line in report(left, total):
                self.say(line)
            self.say(f"the signal stays on ConfigMap {self.namespace}/wcow-runtime-plan")
            return EXIT_FAILED
        self.unsignal()
        self.say(f"uninstalled: {total} Windows node(s) clean")
        return EXIT_OK

    def delete_profiles(self) -> bool:
        names = [str(p["metadata"]["name"]) for p in self.api.profiles()]
        self.say(f"deleting {len(names)} WindowsRuntimeProfile(s): {', '.join(names) or '-'}")
        for name in names:
            self.api.delete_profile(name)
        # Gone, and out of the plan: the operator replaces the plan ConfigMap when it drops
        # their entries, which would take a signal set before off again.
        while True:
            left = [str(p["metadata"]["name"]) for p in self.api.profiles()]
            planned = plan_handlers(self.api.plan(self.namespace))
            if not left and not planned:
                return True
            if self.deadline.left() <= 0:
                waiting = (
                    f"profiles still there: {', '.join(left)} (a profile of an earlier version "
                    "keeps its finalizer runtime.wcow.dev/cleanup until the operator removes it)"
                    if left
                    else f"the plan still names {', '.join(planned)}"
                )
                self.say(f"error: {waiting}: is wcow-operator running?")
                return False
            self.sleep(POLL_SECONDS)

    def delete_runtime_classes(self) -> None:
        """The RuntimeClasses the deleted profiles controlled. The garbage collector deletes
        them too, on its own time; but once `helm uninstall` deleted the CRD it can no longer
        tell that their owner is gone, and they would stay."""
        owned = owned_runtime_classes(self.api.runtime_classes())
        for name, uid in owned:
            self.api.delete_runtime_class(name, uid)
        if owned:
            self.say(f"deleted {len(owned)} RuntimeClass(es) of the deleted profiles")

    def signal(self) -> bool:
        """Annotate the plan ConfigMap (again after a conflict with the operator's write)."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        while True:
            plan = self.api.plan(self.namespace)
            if plan is not None and signal_of(plan) is not None:
                return True
            if plan is not None and self._replaced(plan, stamp):
                self.say(f"signalled the agents (runtime.wcow.dev/uninstall={stamp})")
                return True
            if plan is not None:
                continue  # 409: the operator wrote it meanwhile; read it again
            if self.deadline.left() <= 0:
                self.say(
                    f"error: no ConfigMap {self.namespace}/wcow-runtime-plan to signal the "
                    "agents on (is wcow-operator running in this namespace?)"
                )
                return False
            self.sleep(POLL_SECONDS)

    def wait_clean(self) -> tuple[int, dict[str, str]]:
        shown = -1
        while True:
            nodes = self.api.windows_nodes(metadata_only=True)
            left = not_clean(nodes)
            if len(left) != shown:
                self.say(f"{len(nodes) - len(left)}/{len(nodes)} Windows node(s) clean")
                shown = len(left)
            if not left or self.deadline.left() <= 0:
                return len(nodes), left
            self.sleep(POLL_SECONDS)

    def unsignal(self) -> None:
        for _ in range(5):
            plan = self.api.plan(self.namespace)
            if plan is None or signal_of(plan) is None or self._replaced(plan, None):
                return
        print("warning: the signal could not be taken off the plan", file=sys.stderr)

    def _replaced(self, plan: dict[str, Any], value: str | None) -> bool:
        """The plan written with ``value`` as its signal; False on a conflict (409)."""
        try:
            self.api.replace_plan(self.namespace, with_signal(plan, value))
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True
