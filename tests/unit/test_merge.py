"""Merging handlers into users' config.toml files: only owned tables change, reruns write
nothing, removal restores the file, conflicts are left alone, bad files are refused."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeProfile
from tests.containerd import config_dump, needs_containerd
from wcow_agent.config.merge import merge_config
from wcow_agent.config.merge_decision import BUILTIN_RUNTIMES_1_6, MARKER, ConfigError
from wcow_contract.wire.runtime_table import RUNTIMES_PATH, runtime_table

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
EDITABLE = sorted(p for p in CONFIGS.glob("*.toml") if not p.name.startswith("v1"))


@pytest.fixture
def desired(make_profile: MakeProfile) -> dict[str, dict[str, Any]]:
    return {
        "hv": runtime_table(make_profile("hv", vm={"memoryMB": 2048})),
        "proc": runtime_table(make_profile("proc", isolation="Process")),
    }


def runtimes_of(text: str) -> dict[str, Any]:
    document = tomllib.loads(text)
    node: Any = document
    for name in RUNTIMES_PATH[document["version"]]:
        node = node.get(name, {})
    return dict(node)


def without(text: str, handlers: set[str]) -> dict[str, Any]:
    """The parsed file with these handlers taken out, to compare everything else."""
    document = tomllib.loads(text)
    node: Any = document
    for name in RUNTIMES_PATH[document.get("version", 2)]:
        node = node.setdefault(name, {})
    for handler in handlers:
        node.pop(handler, None)
    return document


@pytest.mark.parametrize("config", EDITABLE, ids=lambda p: p.name)
def test_apply_rerun_and_remove(config: Path, desired: dict[str, dict[str, Any]]) -> None:
    original = config.read_text(encoding="utf-8")
    # A file without `version` takes the node's containerd schema (here 1.x: 2).
    applied = merge_config(original, desired, {}, fallback_version=2)
    assert applied.added[:2] == ["hv", "proc"]
    assert runtimes_of(applied.text)["hv"] == desired["hv"]
    assert runtimes_of(applied.text)["proc"] == desired["proc"]
    # Every byte of the user's file is still there, in order (we only insert).
    assert _is_subsequence(original.splitlines(), applied.text.splitlines())
    # Nothing else changed in meaning either (but a `version` line for a file without).
    outside = without(applied.text, set(applied.owned))
    if "version" not in tomllib.loads(original):
        assert outside.pop("version") == 2
    assert outside == without(original, set())

    rerun = merge_config(applied.text, desired, applied.owned, fallback_version=2)
    assert rerun.text == applied.text
    assert (rerun.added, rerun.updated, rerun.removed) == ([], [], [])

    removed = merge_config(applied.text, {}, applied.owned, pristine=original, fallback_version=2)
    assert removed.text == original
    assert removed.owned == {}
    # Without the pristine copy the result still means the same as the original.
    unmarked = tomllib.loads(merge_config(applied.text, {}, applied.owned).text)
    if "version" not in tomllib.loads(original):
        unmarked.pop("version")
    assert unmarked == tomllib.loads(original)


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    iterator = iter(big)
    return all(line in iterator for line in small)


def test_changed_profile_updates_only_its_table(
    make_profile: MakeProfile, desired: dict[str, dict[str, Any]]
) -> None:
    original = (CONFIGS / "v2-user-runtimes.toml").read_text()
    applied = merge_config(original, desired, {})
    bigger = {**desired, "hv": runtime_table(make_profile("hv", vm={"memoryMB": 8192}))}
    updated = merge_config(applied.text, bigger, applied.owned)
    assert updated.updated == ["hv"]
    assert runtimes_of(updated.text)["hv"]["options"]["VmMemorySizeInMb"] == 8192
    assert runtimes_of(updated.text)["team-secure"] == runtimes_of(original)["team-secure"]


def test_drift_in_an_owned_table_is_repaired(desired: dict[str, dict[str, Any]]) -> None:
    original = (CONFIGS / "v3-containerd-2.1-default.toml").read_text()
    applied = merge_config(original, desired, {})
    tampered = applied.text.replace("VmMemorySizeInMb = 2048", "VmMemorySizeInMb = 512")
    assert tampered != applied.text
    repaired = merge_config(tampered, desired, applied.owned)
    assert repaired.updated == ["hv"]
    assert repaired.text == applied.text


def test_lost_state_is_recovered_from_the_marker(desired: dict[str, dict[str, Any]]) -> None:
    original = (CONFIGS / "v2-containerd-1.7-default.toml").read_text()
    applied = merge_config(original, desired, {})
    assert applied.text.count(MARKER) == 2
    removed = merge_config(applied.text, {}, {})
    assert removed.text == original


def test_a_table_the_agent_did_not_write_is_a_conflict(make_profile: MakeProfile) -> None:
    original = (CONFIGS / "v2-user-runtimes.toml").read_text()
    mine = runtime_table(make_profile("team-secure"))
    result = merge_config(original, {"team-secure": mine}, {})
    assert "team-secure" in result.conflicts
    assert "did not write" in result.conflicts["team-secure"]
    assert result.text == original
    assert result.owned == {}


def test_a_schema_1_file_keeps_its_schema_and_is_given_back(
    desired: dict[str, dict[str, Any]],
) -> None:
    """A schema-1 file (no `version`, `[plugins.cri]`: AKS WS2022, kube-up) is merged in its
    own names, without a `version` line; containerd 1.x's built-in handlers are seeded as
    into a version-2 file (it has no runtimes yet); removal gives the file back. Which
    containerd line may be given such a file is the placement's decision (on 2.0-2.2 none)."""
    original = (CONFIGS / "v1-legacy.toml").read_text()
    result = merge_config(original, desired, {})
    assert result.version == 1
    merged = tomllib.loads(result.text)
    assert "version" not in merged
    runtimes = merged["plugins"]["cri"]["containerd"]["runtimes"]
    assert {h: runtimes[h] for h in desired} == desired
    assert {h for h, mark in result.owned.items() if mark == "seeded"} == {
        "runhcs-wcow-process",
        "runhcs-wcow-hypervisor",
    }
    assert merged["plugins"]["cri"]["containerd"]["snapshotter"] == "windows"
    removed = merge_config(result.text, {}, result.owned, pristine=original)
    assert removed.text == original


def test_broken_toml_is_refused(desired: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        merge_config("version = 2\n[plugins\n", desired, {})


def test_v2_file_gaining_its_first_runtime_keeps_containerds_defaults(
    desired: dict[str, dict[str, Any]],
) -> None:
    applied = merge_config("version = 2\n", desired, {}, BUILTIN_RUNTIMES_1_6)
    runtimes = runtimes_of(applied.text)
    assert runtimes["runhcs-wcow-process"] == {"runtime_type": "io.containerd.runhcs.v1"}
    assert applied.owned["runhcs-wcow-process"] == "seeded"
    # still seeded, not duplicated, on rerun; gone with the last handler
    rerun = merge_config(applied.text, desired, applied.owned, BUILTIN_RUNTIMES_1_6)
    assert rerun.text == applied.text
    emptied = merge_config(applied.text, {}, applied.owned, BUILTIN_RUNTIMES_1_6, "version = 2\n")
    assert emptied.text == "version = 2\n"


def test_v2_file_without_its_default_runtime_is_refused(
    desired: dict[str, dict[str, Any]],
) -> None:
    broken = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.other]\n'
        'runtime_type = "io.containerd.runhcs.v1"\n'
    )
    with pytest.raises(ConfigError, match="default runtime 'runhcs-wcow-process'"):
        merge_config(broken, desired, {})


@needs_containerd
@pytest.mark.parametrize(
    "config", [p for p in EDITABLE if p.name.startswith("v2")], ids=lambda p: p.name
)
def test_merged_v2_files_load_in_containerd_with_the_default_runtime(
    config: Path, desired: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    merged = tmp_path / "config.toml"
    merged.write_text(merge_config(config.read_text(), desired, {}).text)
    cri = config_dump(merged)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    # Debian's build defaults to runc; on Windows the file's name or runhcs-wcow-process.
    windows_default = (
        tomllib.loads(config.read_text())
        .get("plugins", {})
        .get("io.containerd.grpc.v1.cri", {})
        .get("containerd", {})
        .get("default_runtime_name", "runhcs-wcow-process")
    )
    assert windows_default in cri["runtimes"]
    assert cri["runtimes"]["hv"]["options"] == desired["hv"]["options"]
