"""An agent frozen (SIGSTOP) while it holds the rollout's permission, as a Windows node
that hangs mid-apply: the rollout waits for it only --rollout-timeout-seconds, then halts
as docs/rollout.md says (RolledOut=False RolloutHalted naming the node, nobody new let in);
once the agent runs again (SIGCONT) it finishes and reports, and the resume annotation lets
the rest of the fleet in. The frozen agent runs as ``wcow-agent simulate`` in a process of
its own; its host steps go to a journal file.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.control_plane import ControlPlane
from tests.e2e.operator_harness import installed_crd, namespace, profiles_cleaned_up
from tests.faults.harness import preflights, simulated_agent
from tests.fleet.harness import View, raw, running_fleet, running_operator
from tests.fleet.paced import (
    MEMORY,
    annotate_resume,
    appliers,
    fleet_summary,
    halted,
    hyperv_on_every_node,
    new_plan,
    patch_spec,
    reached,
    until,
)
from wcow_contract.wire.agent_status import AGENT_STATUS_ANNOTATION

pytestmark = pytest.mark.e2e

TIMEOUT_SECONDS = 30  # the operator's least --rollout-timeout-seconds
NODES = 4  # three in this process, one frozen in its own


def test_an_agent_frozen_with_permission_halts_the_rollout_at_the_timeout_and_resumes(
    plane: ControlPlane, kube: client.ApiClient, tmp_path: Path
) -> None:
    hv, frozen = "frozen-hv", "frozen-p1"
    journal = tmp_path / "journal.jsonl"
    flags = ("--max-unavailable", "1", "--rollout-timeout-seconds", str(TIMEOUT_SECONDS))
    with (
        installed_crd(kube),
        namespace(kube, "faults-frozen") as ns,
        running_operator(plane.kubeconfig, ns, tmp_path / "operator.log", *flags) as operator,
        running_fleet(
            plane.kubeconfig, tmp_path / "fleet", ns, "frozen-w", 3, canary_seconds=0.5
        ) as fleet,
        simulated_agent(
            plane.kubeconfig,
            ns,
            "frozen-p",
            journal,
            tmp_path / "agent.log",
            "--retry-seconds",
            "2",
            "--fault",
            "slow-canary=4",
        ) as agent,
        profiles_cleaned_up(kube, [hv]),
    ):
        view = View(kube, [fleet])
        operator.until("the frozen node's first report", lambda: status_of(view, frozen))

        def explain() -> str:
            status = status_of(view, frozen) or {}
            return f"{fleet_summary(view, kube, ns, hv)}\n{frozen}: {status.get('handlers')}"

        first = hyperv_on_every_node(operator, view, kube, ns, hv, total=NODES)
        operator.until(f"{frozen} on the first plan", lambda: applied(view, frozen) == first)
        since = time.time()
        patch_spec(kube, hv, {"vm": {"memoryMB": 3072}})
        change = new_plan(operator, kube, ns, first)
        operator.until(f"{frozen} applying", lambda: preflights(journal, since))
        agent.send_signal(signal.SIGSTOP)
        stopped = time.time()

        stop = until(operator, f"{hv} halted on {frozen}", lambda: halted(view, hv), explain,
                     timeout=TIMEOUT_SECONDS + 60)  # fmt: skip
        halted_after = time.time() - stopped
        assert frozen in stop["message"], stop["message"]
        assert halted_after >= TIMEOUT_SECONDS - 2, f"halted after {halted_after:.0f} s"
        inside = appliers(fleet.nodes, stopped, time.time())
        time.sleep(3.0)  # nobody new is let in while halted
        assert appliers(fleet.nodes, stopped) == inside, "a node was let in after the halt"

        agent.send_signal(signal.SIGCONT)
        operator.until(f"{frozen} reports the change", lambda: applied(view, frozen) == change)
        assert halted(view, hv), "the rollout resumed without the resume annotation"
        annotate_resume(kube, hv, "after-sigcont")
        done = lambda: reached(view, kube, ns, hv, (MEMORY, 3072), NODES) == change  # noqa: E731
        until(operator, "the rollout finished after the resume", done, explain)
        print(
            f"agent frozen mid-apply: rollout halted {halted_after:.0f} s later "
            f"(--rollout-timeout-seconds {TIMEOUT_SECONDS}), naming {frozen}; "
            f"{len(inside)} other nodes applying meanwhile; finished after SIGCONT and resume"
        )


def status_of(view: View, node: str) -> dict[str, Any] | None:
    """The node's agent report; None until its process registered the Node and reported."""
    body = raw(view.core.read_node, node)
    text = ((body or {}).get("metadata", {}).get("annotations") or {}).get(AGENT_STATUS_ANNOTATION)
    return json.loads(text) if text else None


def applied(view: View, node: str) -> str | None:
    return (status_of(view, node) or {}).get("appliedPlanHash")
