"""Rendered version-2 TOML loads in a real containerd (Debian's 1.6 package) with every
handler table intact. containerd 1.6 does not know version 3 plugin ids, so only the
version-2 fragment can be checked here.

``config dump`` echoes each handler's raw ``options`` map: that they come back equal proves
the file loads and keeps them, not that the shim receives them. containerd 1.6's hcsshim
lacks DefaultContainerAnnotations, NoInheritHostTimezone and ScrubLogs and drops them when a
sandbox is created; the agent's version matrix (``wcow_agent.containerd_lines``) knows that,
and the last assertion shows the dump cannot."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SAMPLES
from tests.containerd import CONTAINERD, config_dump, needs_containerd
from wcow_agent.config.containerd_lines import line_for, unsupported
from wcow_agent.host.containerd import ContainerdCli
from wcow_agent.host.process import SubprocessRunner
from wcow_operator.cli import load_profiles
from wcow_operator.render.profile_set import render_all

pytestmark = needs_containerd


def test_rendered_v2_fragment_loads_with_every_handler_table(tmp_path: Path) -> None:
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    rendered = render_all([item.profile for item in loaded])
    config = tmp_path / "config.toml"
    config.write_text(rendered.containerd_toml[2], encoding="utf-8")

    effective = config_dump(config)
    runtimes = effective["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]  # type: ignore[index]
    for handler, entry in rendered.plan.handlers.items():
        assert handler in runtimes, f"containerd dropped handler {handler}"
        table = runtimes[handler]
        assert table["runtime_type"] == entry.runtime["runtime_type"]
        assert table["container_annotations"] == entry.runtime["container_annotations"]
        assert table["pod_annotations"] == entry.runtime.get("pod_annotations", [])
        assert table["options"] == entry.runtime["options"]
    version = ContainerdCli(str(CONTAINERD), SubprocessRunner()).version()
    stripped = {
        handler
        for handler, entry in rendered.plan.handlers.items()
        if unsupported(entry.runtime, version)
    }
    if line_for(version).name == "1.6":
        # Echoed by the dump above, dropped by the shim's decoder: only the matrix tells.
        assert stripped == {
            handler
            for handler, entry in rendered.plan.handlers.items()
            if "DefaultContainerAnnotations" in entry.runtime["options"]
        }
    else:
        assert stripped == set()
