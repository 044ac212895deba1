"""The pause image key in config.toml as one more edit of a change (``--pause-image``), and
the record that holds readiness until a change of it is proven (``pause_change``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.placed import Placed
from wcow_agent.config.sandbox_image import held_pause_image, with_pause_image
from wcow_agent.config.state import StateJournal
from wcow_agent.cycle import pause_change
from wcow_agent.cycle.decisions import CycleReport, HostFacts, guest_builds_of
from wcow_agent.cycle.pause_image import PauseImage, PauseImages
from wcow_agent.host.interfaces import HostError
from wcow_contract.wire.plan import PlanEntry


class PauseEdits:
    def __init__(self, flag: str | None, pause: PauseImages) -> None:
        self.flag = flag
        """``--pause-image``: the pause image the agent sets in config.toml (None: the
        agent leaves the key as the node has it, or puts back what it replaced)."""
        self.pause = pause

    def edit(
        self, report: CycleReport, journal: StateJournal, placed: Placed
    ) -> tuple[Placed, bool]:
        """The change with the pause image the agent manages (the flag, or the value it
        replaced, put back once the flag is gone); whether that changes it."""
        result = placed.result
        manage, image = pause_change.edit_target(self.flag, journal.state)
        if not manage:
            return placed, False
        try:
            text = _with_pause_image(placed, image)
        except ConfigError as error:
            report.event("PauseImageNotSet", str(error), warning=True)
            return placed, False
        unproven = journal.state.pause_change is not None
        if text == result.text and self.flag is None and not unproven:
            journal.pause_image_released()  # the file holds what it held before the agent
        return replace(placed, result=replace(result, text=text)), text != result.text

    def begin(
        self,
        report: CycleReport,
        journal: StateJournal,
        placed: Placed,
        original: str | None,
        judged: tuple[HostFacts, Mapping[str, PlanEntry]],
    ) -> None:
        """Before the first write of the key: what it held (``original``: config.toml
        before, None: there was none), to put back later; before each change: the record
        that holds readiness until the change is proven."""
        facts, eligible = judged
        version = placed.result.version
        source = None if original is None else held_pause_image(original, version)
        if not journal.state.pause_held:
            journal.pause_image_held(source)
        _, target = pause_change.edit_target(self.flag, journal.state)
        try:
            before: PauseImage | None = self.pause.current()
        except (HostError, OSError, ValueError):
            before = None  # which guest builds it boots is not known: none is left out
        baseline = pause_change.ready_before(journal.state, eligible, before, facts)
        pause_change.begin(report, journal, (target, source), baseline, placed.config_hash)

    def survey(self, report: CycleReport, facts: HostFacts) -> None:
        """Which pause image containerd runs sandboxes from and which guest builds it boots
        (asked again after containerd restarted); unknown when CRI cannot say."""
        if report.restarts:
            self.pause.forget()
        try:
            pause = self.pause.current()
        except (HostError, OSError, ValueError) as error:
            report.event("PauseImageUnknown", f"cannot read the node's pause image: {error}")
            return
        report.pause_image = pause.image
        report.pause_build = pause.build
        report.guest_builds = guest_builds_of(pause.build, facts)
        if pause.build is None:
            report.event(
                "PauseImageBuildUnknown",
                f"the pause image {pause.image} names no Windows build (os.version) in its "
                "config: no guest build is known to boot from it",
                warning=True,
            )


def _with_pause_image(placed: Placed, image: str | None) -> str:
    """config.toml with the pause image key set; refused where the distribution renders
    config.toml (the key would be gone at its next start)."""
    if placed.placement.way == "template":
        raise ConfigError(
            "config.toml is rendered by the distribution on this node: set the pause image "
            f"in its own configuration (RKE2: pause-image), not with --pause-image {image}"
        )
    return with_pause_image(placed.result.text, placed.result.version, image)
