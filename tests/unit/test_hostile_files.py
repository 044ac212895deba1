"""Hostile files fail fast, in bounded memory, with one line naming the file.

Each case runs the real command in a subprocess with a wall-clock timeout and an address-space
limit, so a hang, a memory blow-up or a traceback fails the test instead of the machine.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from wcow_contract.wire.plan import dump_plan
from wcow_operator.render.profile_set import render_all

BIN = Path(sys.executable).parent  # the venv's console scripts
TIME_LIMIT = 10.0  # generous for a busy 2-core machine; the commands take well under 2 s
MEMORY_LIMIT = 1536 * 1024 * 1024  # address space; the interpreter and its imports need ~300 MB
CONFIG_V2 = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'

HEADER = """\
apiVersion: runtime.wcow.dev/v1alpha1
kind: WindowsRuntimeProfile
metadata: {name: hostile}
"""


def _alias_bomb() -> str:
    lines = [HEADER, 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        refs = ",".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    lines.append("spec:\n  isolation: Process\n  containerd:\n    options: {x: *a9}")
    return "\n".join(lines) + "\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(*argv: str) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        preexec_fn=_limit_memory,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _wcow(command: str, path: Path) -> tuple[int, str, float]:
    return _run(str(BIN / "wcow"), command, str(path))


DEEP = 100_000
HOSTILE_PROFILES: dict[str, Callable[[], str]] = {
    "alias-bomb.yaml": _alias_bomb,
    "deep-flow.yaml": lambda: "[" * DEEP + "]" * DEEP + "\n",
    "deep-block.yaml": lambda: (
        HEADER
        + "spec:\n"
        + "".join(f"{' ' * (2 * i + 2)}k{i}:\n" for i in range(3000))
        + " " * 6002
        + "x\n"
    ),
    "deep.json": lambda: '{"a":' * DEEP + "1" + "}" * DEEP + "\n",
    "recursive-alias.yaml": lambda: HEADER + "spec: &s\n  isolation: Process\n  x: *s\n",
}


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize("name", sorted(HOSTILE_PROFILES))
def test_wcow_fails_fast_with_one_line_naming_the_file(
    tmp_path: Path, command: str, name: str
) -> None:
    path = tmp_path / name
    path.write_text(HOSTILE_PROFILES[name](), encoding="utf-8")
    code, stderr, took = _wcow(command, path)
    assert code == 1, stderr[-2000:]
    assert took < TIME_LIMIT
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-2000:]
    assert lines[0].startswith(f"error: {path}:"), lines[0]
    assert len(lines[0]) < 400


def test_an_oversized_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w", encoding="utf-8") as handle:
        handle.write(HEADER + "spec: {isolation: Process}\n")
        handle.write(("# " + "x" * 1022 + "\n") * (20 * 1024))  # 20 MiB of comments
    code, stderr, took = _wcow("validate", path)
    assert code == 1
    assert took < TIME_LIMIT
    assert stderr.strip().splitlines() == [stderr.strip()]
    assert str(path) in stderr
    assert "MiB" in stderr


def test_plain_yaml_errors_are_one_line_too(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(HEADER + "spec: [unclosed\n", encoding="utf-8")
    code, stderr, _ = _wcow("validate", path)
    assert code == 1
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert f"{path}: not valid YAML" in stderr
    assert "line " in stderr


def test_anchors_within_the_limits_still_work(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        HEADER + "spec:\n  isolation: HyperV\n  windowsBuild: &b ltsc2022\n"
        "  annotations: {pod: &p ['io.microsoft.virtualmachine.*'], container: *p}\n",
        encoding="utf-8",
    )
    code, stderr, _ = _wcow("validate", path)
    assert code == 0, stderr


# ---- the agent's readers: the plan (JSON) and config.toml (TOML) ----


def _good_plan(tmp_path: Path) -> Path:
    from tests.conftest import profile_document
    from wcow_contract.errors import parse_profile

    plan = render_all([parse_profile(profile_document("hv"))]).plan
    path = tmp_path / "plan.json"
    path.write_text(dump_plan(plan), encoding="utf-8")
    return path


def _agent_merge(config: Path, plan: Path) -> tuple[int, str, float]:
    return _run(
        str(BIN / "wcow-agent"),
        "merge",
        "--config",
        str(config),
        "--plan",
        str(plan),
        "--host-build",
        "10.0.20348",
    )


@pytest.mark.parametrize(
    "text",
    ["[" * DEEP + "]" * DEEP, '{"kind":' * DEEP + "1" + "}" * DEEP],
    ids=["deep-array", "deep-object"],
)
def test_agent_refuses_a_deeply_nested_plan(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG_V2, encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(text, encoding="utf-8")
    code, stderr, took = _agent_merge(config, plan)
    assert code != 0
    assert took < TIME_LIMIT
    assert "Traceback" not in stderr
    assert str(plan) in stderr or "plan" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr[-2000:]


@pytest.mark.parametrize(
    "text",
    [
        CONFIG_V2 + "x = " + "[" * 5000 + "]" * 5000 + "\n",
        CONFIG_V2 + "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
        CONFIG_V2 + "a" + ".b" * 5000 + " = 1\n",
    ],
    ids=["deep-array", "deep-inline-table", "deep-dotted-key"],
)
def test_agent_refuses_a_deeply_nested_config_toml(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    before = config.read_bytes()
    code, stderr, took = _agent_merge(config, _good_plan(tmp_path))
    assert took < TIME_LIMIT
    assert "Traceback" not in stderr
    assert config.read_bytes() == before  # merge without --write never writes
    if "b.b.b" in text:
        # Deep dotted keys parse without recursion (a table per key): merged like any file.
        assert code == 0, stderr[-2000:]
        return
    assert code != 0
    assert "config.toml" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr[-2000:]


def test_the_good_plan_helper_merges(tmp_path: Path) -> None:
    """The hostile cases above fail for their input, not because merge cannot run here."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG_V2, encoding="utf-8")
    code, stderr, _ = _agent_merge(config, _good_plan(tmp_path))
    assert code == 0, stderr
    assert json.loads(_good_plan(tmp_path).read_text(encoding="utf-8"))["handlers"]
