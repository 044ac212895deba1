"""The merge on a corpus of real-world config.toml files (``tests/fixtures/configs``):
containerd 1.6 / 1.7 / 2.x defaults, hand-commented files, user runtimes, minimal and
versionless files, and the same files with Windows line endings.

For every file: outside the agent's own tables the bytes are the user's, in order (only
blank separator lines are added); a rerun is byte-identical; removing everything gives the
original file back byte for byte. Merged version-2 files load in Debian's containerd (which
proves loading and tables, not what the shim decodes: see ``containerd_lines``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent.conftest import edited, hyperv, make_plan, process
from tests.agent.fakes import CONFIGS, FakeNode
from tests.containerd import CONTAINERD, config_dump, needs_containerd
from wcow_agent.config.containerd_lines import line_for, unsupported
from wcow_agent.config.merge import merge_config
from wcow_agent.config.merge_decision import BUILTIN_RUNTIMES_1_6
from wcow_agent.host.containerd import ContainerdCli
from wcow_agent.host.interfaces import Host
from wcow_agent.host.process import SubprocessRunner
from wcow_agent.simulator.containerd import SimulatedContainerd
from wcow_contract.wire.runtime_table import RUNTIMES_PATH

CORPUS = sorted(p for p in CONFIGS.glob("*.toml") if not p.name.startswith("v1"))
PLAN = make_plan(
    hyperv(), process(), hyperv("hv-reserve", vm={"memoryMB": 4096, "fullyPhysicallyBacked": True})
)
DESIRED = {h: e.runtime for h, e in PLAN.handlers.items()}


def variants() -> list[tuple[str, str]]:
    cases = []
    for path in CORPUS:
        text = path.read_text(encoding="utf-8")
        cases.append((path.name, text))
        cases.append((path.name + "+crlf", text.replace("\n", "\r\n")))
    return cases


def _header_path(line: str) -> tuple[str, ...] | None:
    stripped = line.strip()
    if not stripped.startswith("[") or stripped.startswith("[["):
        return None
    key = stripped[1 : stripped.index("]")]
    node: Any = tomllib.loads(f"[{key}]\n")
    path: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        name = next(iter(node))
        path.append(name)
        node = node[name]
    return tuple(path)


def outside_owned(text: str, owned: set[str], version: int) -> list[str]:
    """The lines of ``text`` that are not inside a table the agent owns."""
    runtimes = RUNTIMES_PATH[version]
    lines, inside = [], False
    for line in text.splitlines(keepends=True):
        path = _header_path(line)
        if path is not None:
            inside = (
                len(path) > len(runtimes)
                and path[: len(runtimes)] == runtimes
                and path[len(runtimes)] in owned
            )
        # The agent writes no comment lines: those are the user's wherever they are.
        if not inside or not line.strip() or line.strip().startswith("#"):
            lines.append(line)
    return lines


def is_subsequence(small: list[str], big: list[str]) -> bool:
    iterator = iter(big)
    return all(line in iterator for line in small)


@pytest.mark.parametrize(("name", "original"), variants(), ids=[n for n, _ in variants()])
def test_user_bytes_survive_reruns_are_identical_and_removal_restores(
    name: str, original: str
) -> None:
    applied = merge_config(original, DESIRED, {}, fallback_version=2)
    owned = set(applied.owned)
    assert set(DESIRED) <= owned

    outside = outside_owned(applied.text, owned, applied.version)
    if "version" not in tomllib.loads(original):
        assert outside[0].rstrip("\r\n") == "version = 2"
        outside = outside[1:]
    before = original.splitlines(keepends=True)
    # Byte for byte, line endings included: the user's lines, in order, and nothing else
    # outside the agent's tables but blank separator lines.
    assert is_subsequence(before, outside), "a user line changed or moved"
    assert [line for line in outside if line.strip()] == [line for line in before if line.strip()]

    rerun = merge_config(applied.text, DESIRED, applied.owned, fallback_version=2)
    assert rerun.text == applied.text
    assert not rerun.changed(applied.text)

    removed = merge_config(applied.text, {}, applied.owned, pristine=original, fallback_version=2)
    assert removed.text == original


def test_removing_one_handler_touches_only_its_table() -> None:
    original = (CONFIGS / "v2-commented-by-hand.toml").read_text()
    applied = merge_config(original, DESIRED, {})
    fewer = {k: v for k, v in DESIRED.items() if k != "proc"}
    result = merge_config(applied.text, fewer, applied.owned)
    assert result.removed == ["proc"]

    def content(text: str, owned: set[str]) -> list[str]:
        return [line for line in outside_owned(text, owned, 2) if line.strip()]

    assert content(result.text, set(fewer)) == content(applied.text, set(DESIRED))
    assert "runtimes.proc]" not in result.text


handlers = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True).filter(
    lambda h: not h.startswith("runhcs-wcow")
)
values = st.one_of(
    st.integers(min_value=0, max_value=2**31 - 1),
    st.booleans(),
    st.text(max_size=30),
)
tables = st.fixed_dictionaries(
    {"runtime_type": st.just("io.containerd.runhcs.v1")},
    optional={
        "pod_annotations": st.lists(st.text(max_size=20), max_size=3),
        "options": st.dictionaries(
            st.sampled_from(["SandboxIsolation", "VmMemorySizeInMb", "LogLevel", "SandboxImage"]),
            values,
            max_size=4,
        ),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(CORPUS),
    crlf=st.booleans(),
    desired=st.dictionaries(handlers, tables, min_size=1, max_size=4),
)
def test_any_handlers_round_trip_on_any_corpus_file(
    config: Path, crlf: bool, desired: dict[str, Any]
) -> None:
    original = config.read_text(encoding="utf-8")
    if crlf:
        original = original.replace("\n", "\r\n")
    existing = tomllib.loads(original)
    version = existing.get("version", 2)
    node: Any = existing
    for name in RUNTIMES_PATH[version]:
        node = node.get(name, {})
    desired = {h: t for h, t in desired.items() if h not in node}  # user tables: conflicts
    applied = merge_config(original, desired, {}, BUILTIN_RUNTIMES_1_6, fallback_version=2)
    parsed: Any = tomllib.loads(applied.text)
    for name in RUNTIMES_PATH[applied.version]:
        parsed = parsed[name] if desired else parsed.get(name, {})
    for handler, table in desired.items():
        assert parsed[handler] == table
    assert (
        merge_config(
            applied.text, desired, applied.owned, BUILTIN_RUNTIMES_1_6, fallback_version=2
        ).text
        == applied.text
    )
    assert (
        merge_config(
            applied.text, {}, applied.owned, BUILTIN_RUNTIMES_1_6, original, fallback_version=2
        ).text
        == original
    )


@needs_containerd
@pytest.mark.parametrize(
    "name",
    [p.name for p in CORPUS if p.name.startswith("v2") or p.name.startswith("no-version")],
)
def test_merged_v2_files_load_in_real_containerd_with_every_handler_table(
    name: str, tmp_path: Path
) -> None:
    """containerd loads the file and keeps every table. ``config dump`` echoes the raw
    ``options`` map, so this does not prove the shim receives them: containerd 1.6 drops
    DefaultContainerAnnotations when it decodes them (``containerd_lines``), which the
    dump cannot show."""
    original = (CONFIGS / name).read_text()
    builtins = BUILTIN_RUNTIMES_1_6 if "1.6" in name else None
    applied = merge_config(
        original, DESIRED, {}, *([builtins] if builtins else []), fallback_version=2
    )
    merged = tmp_path / "config.toml"
    merged.write_text(applied.text)

    cri = config_dump(merged)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    windows_default = (
        tomllib.loads(applied.text)["plugins"]["io.containerd.grpc.v1.cri"]
        .get("containerd", {})
        .get("default_runtime_name", "runhcs-wcow-process")
    )
    assert windows_default in cri["runtimes"], (
        "containerd 1.x would not start: default runtime gone"
    )
    for handler, table in DESIRED.items():
        assert cri["runtimes"][handler]["options"] == table["options"]  # the raw echo
        assert cri["runtimes"][handler]["runtime_type"] == table["runtime_type"]
    version = ContainerdCli(str(CONTAINERD), SubprocessRunner()).version()
    if line_for(version).name == "1.6":
        # The dump shows the reserve class's annotations; the shim would never see them.
        assert cri["runtimes"]["hv-reserve"]["options"]["DefaultContainerAnnotations"]
        assert unsupported(DESIRED["hv-reserve"], version)


class RealContainerdCli(SimulatedContainerd):
    """The node's containerd binary for version, defaults and config dump; the service
    restart stays fake (there is no Windows service here)."""

    def __init__(self, node: FakeNode) -> None:
        super().__init__(node)
        assert CONTAINERD is not None
        self.cli = ContainerdCli(CONTAINERD, SubprocessRunner())

    def version(self) -> str:
        return self.cli.version()

    def config_dump(self, config: Path) -> str:
        self.node.dump_calls.append(config.read_text())
        return self.cli.config_dump(config)


def real_containerd_node(root: Path, config: str) -> tuple[FakeNode, Host]:
    node = FakeNode(root, config_text=config)
    node.containerd_version = ContainerdCli(str(CONTAINERD), SubprocessRunner()).version()
    base = node.host()
    return node, Host(base.windows, RealContainerdCli(node), base.cri, base.hcs)


@needs_containerd
def test_the_agent_checks_its_file_with_the_nodes_real_containerd(tmp_path: Path) -> None:
    node, host = real_containerd_node(
        tmp_path, (CONFIGS / "v2-containerd-1.6-default.toml").read_text()
    )
    agent = node.agent_with(host=host)
    agent.facts()

    report = agent.reconcile(PLAN)

    assert report.result == "applied", report.events
    assert node.dump_calls == [node.disk_text()]
    assert node.running_text == node.disk_text()


@needs_containerd
def test_real_containerd_1x_does_not_see_a_v3_table_and_the_file_is_not_written(
    tmp_path: Path,
) -> None:
    """KD #12936 / prior art: containerd 1.x silently ignores config version 3 plugin ids.
    The pre-flight catches it with the node's own binary, before anything is written."""
    original = (CONFIGS / "v3-containerd-2.1-default.toml").read_text()
    node, host = real_containerd_node(tmp_path, original)
    agent = node.agent_with(host=host)

    report = agent.reconcile(make_plan(hyperv()))

    assert report.result == "rejected"
    outcome = (report.handlers or {})["hv"]
    assert outcome.reason == "ConfigRejected"
    assert "does not see handler(s) hv" in outcome.message
    assert node.disk_text() == original
    assert node.restarts == []


@needs_containerd
def test_real_containerd_refusing_to_load_a_file_stops_the_write(tmp_path: Path) -> None:
    node, host = real_containerd_node(tmp_path, (CONFIGS / "v2-minimal.toml").read_text())
    agent = node.agent_with(host=host)
    plan = make_plan(hyperv())
    runtime = {**plan.handlers["hv"].runtime, "runtime_type": 1}  # containerd wants a string

    report = agent.reconcile(edited(plan, "hv", runtime=runtime))

    assert report.result == "rejected"
    assert "cannot load the merged file" in (report.handlers or {})["hv"].message
    assert node.disk_text() == (CONFIGS / "v2-minimal.toml").read_text()


@needs_containerd
def test_containerd_version_and_defaults_from_the_real_binary() -> None:
    cli = ContainerdCli(str(CONTAINERD), SubprocessRunner())
    assert cli.version().count(".") == 2
    default = tomllib.loads(cli.config_default())
    assert default["version"] == 2
