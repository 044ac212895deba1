"""A pause image change, paced the Kubernetes way: by the agent's readiness.

The plan never names the pause image (a forged plan must not choose what runs on nodes:
docs/security.md), so the operator's rollout does not pace a change of ``--pause-image``
alone: the agent DaemonSet's rolling update does, and it moves to the next node only once the
new agent pod is ready (``maxUnavailable``, ``minReadySeconds``). So from the moment the agent
decides to change the key until the change is proven, ``/readyz`` answers 503 with the
reason, and a failed change keeps it so until the flag changes:

- **applying**: the change is recorded (target, the value it replaces, and the handlers that
  were Ready before it), then written and containerd restarted through the transaction;
- **proving**: containerd came up with it; every earlier canary is void (each sandbox starts
  from the new image), and the handlers Ready before must pass theirs again;
- **failed**: containerd did not come up with it (the transaction rolled it back), or one of
  those handlers failed after it: the value it replaced is written back through the same
  transaction (so the node's classes keep running new pods), and the same target is not tried
  again until the flag names another.

A handler that was not Ready before (``GuestBuildUnsupported``, a failed canary) does not
count. The record lives in the state file, so an agent killed at any step resumes it.
"""

from __future__ import annotations

from collections.abc import Mapping

from wcow_agent.config.state import AgentState, PauseChange, StateJournal
from wcow_agent.cycle.decisions import CycleReport, HostFacts, guest_build_refusal, guest_builds_of
from wcow_agent.cycle.pause_image import PauseImage, wanted_pause_image
from wcow_agent.cycle.transaction import Failures
from wcow_contract.wire.plan import PlanEntry

MESSAGE_MAX = 300  # of one handler's failure, quoted in the reason


def shown(image: str | None) -> str:
    return image or "containerd's default"


def edit_target(flag: str | None, state: AgentState) -> tuple[bool, str | None]:
    """(whether the agent sets the key, to what): the flag's value (or the value it replaced,
    once dropped), except that a change that failed here keeps, or writes back, the value it
    replaced until the flag names another."""
    manage, image = wanted_pause_image(flag, state)
    record = state.pause_change
    if manage and record is not None and record.phase == "failed" and record.target == image:
        return True, record.source
    return manage, image


def forget_stale(report: CycleReport, journal: StateJournal, flag: str | None) -> None:
    """The flag names another value than the recorded change: that change is over (the new
    value gets its own record when it changes the file)."""
    record = journal.state.pause_change
    manage, image = wanted_pause_image(flag, journal.state)
    if record is not None and manage and image != record.target:
        journal.pause_change_ended()
        if record.phase == "failed":
            report.event(
                "PauseImageRetry",
                f"the pause image setting changed from {shown(record.target)} to {shown(image)}; "
                "the failed change no longer holds readiness",
            )


def ready_before(
    state: AgentState,
    eligible: Mapping[str, PlanEntry],
    pause: PauseImage | None,
    facts: HostFacts,
) -> tuple[str, ...]:
    """The handlers Ready now: their table passed a canary, and (Hyper-V) the current pause
    image boots their guest build (unknown pause image: not checked)."""
    guests = guest_builds_of(pause.build, facts) if pause is not None else None
    return tuple(
        sorted(
            h
            for h, entry in eligible.items()
            if state.owned.get(h) is not None
            and state.canaried.get(h) == state.owned.get(h)
            and guest_build_refusal(
                entry,
                pause.image if pause else None,
                guests,
                pause_build=pause.build if pause else None,
                host_build=facts.build,
            )
            is None
        )
    )


def begin(
    report: CycleReport,
    journal: StateJournal,
    change: tuple[str | None, str | None],
    baseline: tuple[str, ...],
    file: str,
) -> None:
    """Before the transaction writes a pause image change (target, the value it replaces)
    in the file of hash ``file``; a rollback of a failed change and a retry of one not
    loaded yet keep their record."""
    target, source = change
    record = journal.state.pause_change
    if record is not None and record.phase == "failed":
        return
    if record is not None and record.target == target:
        if record.phase != "applying":  # the file lost it (edited, restored): load it again
            journal.pause_change_phase("applying")
        return
    journal.pause_change_begun(PauseChange(target, source, baseline), file)
    report.event(
        "PauseImageChanging",
        f"setting the pause image to {shown(target)} (was {shown(source)}); readiness stays "
        f"false until containerd runs it and {', '.join(baseline) or 'no handler'} "
        "(Ready before) pass their canaries again",
    )


def after_transaction(report: CycleReport, journal: StateJournal, failed: Failures) -> None:
    """What the transaction of a pause image change did to its record."""
    if report.restarts:
        journal.canaries_void()
    record = journal.state.pause_change
    if record is None:
        return
    if record.phase == "failed":  # this was the rollback
        if report.result == "applied":
            report.event(
                "PauseImageRolledBack",
                f"the pause image is {shown(record.source)} again after {shown(record.target)} "
                f"failed: {record.reason}",
                warning=True,
            )
        return
    if report.result == "applied":
        journal.pause_change_phase("proving")
    elif report.result in ("rolled_back", "rejected"):
        why = next(iter(failed.values()), ("", "containerd did not load it"))[1]
        journal.pause_change_phase(
            "failed", f"containerd did not come up with it ({why[:MESSAGE_MAX]})"
        )
        report.event(
            "PauseImageFailed",
            f"pause image {shown(record.target)}: containerd did not come up with it; the "
            f"previous config.toml is back ({why[:MESSAGE_MAX]})",
            warning=True,
        )
    # refused or failed before anything changed (CRI unreachable): tried again next cycle


def loaded_elsewhere(journal: StateJournal) -> None:
    """The file already holds the change's target and containerd runs it (an agent killed
    after the restart, before the record said so): prove it now."""
    record, state = journal.state.pause_change, journal.state
    if record is not None and record.phase == "applying" and not state.restart_pending:
        journal.canaries_void()
        journal.pause_change_phase("proving")


def judge(report: CycleReport, journal: StateJournal, eligible: Mapping[str, PlanEntry]) -> None:
    """After the canaries: proven once every handler Ready before is Ready again; failed
    (rolled back next cycle) once one of them is not."""
    record = journal.state.pause_change
    if record is None or record.phase != "proving":
        return
    outcomes = report.handlers or {}
    due = [h for h in record.baseline if h in eligible]
    broken = [
        f"{h} was Ready before and is {outcomes[h].state} now ({outcomes[h].reason}: "
        f"{outcomes[h].message[:MESSAGE_MAX]})"
        for h in due
        if h in outcomes and outcomes[h].state in ("Failed", "Conflict")
    ]
    if broken:
        journal.pause_change_phase("failed", "; ".join(broken))
        report.event(
            "PauseImageFailed",
            f"pause image {shown(record.target)}: {'; '.join(broken)}; writing "
            f"{shown(record.source)} back",
            warning=True,
        )
        report.requeue = True
    elif all(h in outcomes and outcomes[h].state == "Ready" for h in due):
        journal.pause_change_ended()
        report.event(
            "PauseImageProven",
            f"containerd runs pause image {shown(record.target)} and "
            f"{', '.join(due) or 'no handler'} (Ready before) passed their canaries again",
        )
    else:
        report.requeue = True  # a canary could not run yet (network, agent stopping)


def release_if_proven(journal: StateJournal) -> None:
    """The value the agent replaced is back (the flag dropped) and proven: nothing of the
    key is the agent's any more (not proven yet: a later cycle's edit lets go)."""
    if journal.state.pause_change is None:
        journal.pause_image_released()


def readiness_hold(state: AgentState) -> str | None:
    """Why ``/readyz`` is false for a pause image change (None: it is not held)."""
    record = state.pause_change
    if record is None:
        return None
    target = shown(record.target)
    if record.phase == "applying":
        return f"pause image change to {target}: waiting for containerd to come up with it"
    if record.phase == "proving":
        due = ", ".join(record.baseline) or "no handler"
        return f"pause image change to {target}: proving {due} with canaries"
    return (
        f"pause image {target} failed on this node: {record.reason}; the node keeps "
        f"{shown(record.source)}. Set agent.pauseImage (--pause-image) to another value to "
        "go on"
    )
