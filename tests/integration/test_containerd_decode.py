"""containerd's own code judges the rendered handlers: tools/containerd-decode.

A Go module per containerd line (1.7 with hcsshim v0.11, 2.x with hcsshim v0.14; versions
pinned in their go.mod) loads the rendered fragments and an agent-merged config.toml with that
containerd's config loader, then decodes every handler's ``options`` into hcsshim's runhcs
``Options`` the way the CRI plugin does. A key the decoder drops, a value that does not
decode, or a value that decodes to something else fails ``go test``. Debian's containerd 1.6
(test_containerd_loads.py) only echoes the options back, so it cannot catch any of that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.conftest import ROOT, SAMPLES
from wcow_agent.cli import main as agent_main
from wcow_agent.config.sandbox_image import SANDBOX_IMAGE_KEYS, with_pause_image
from wcow_agent.cycle.eligibility import Host, classify_handlers
from wcow_agent.loop.plan_loading import load_plan
from wcow_contract.catalog.runhcs_options import RUNHCS_OPTIONS
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.wire.runtime_table import RUNTIMES_PATH
from wcow_operator.cli import main as wcow_main
from wcow_operator.render.containerd import render_containerd_toml

GO = shutil.which("go")

pytestmark = pytest.mark.skipif(
    GO is None,
    reason="go is not on PATH: containerd's own option decoding (tools/containerd-decode) "
    "needs the Go toolchain (1.25 or newer) and the Go module proxy",
)

TOOLS = ROOT / "tools" / "containerd-decode"
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
HOST_BUILD = "10.0.20348"
PAUSE = "registry.example.com/pause:3.10@sha256:" + "ab" * 32


@dataclass(frozen=True)
class Line:
    module: Path  # the Go module of tools/containerd-decode
    containerd: str  # containerd's Go module path
    toml: str  # the go-toml containerd decodes options with
    must_pass: tuple[str, ...]  # Go tests fed by the files this test writes
    fixture: str  # the line's default config.toml, to merge into
    version: int  # its schema version
    merge_flag: str  # `wcow-agent merge --containerd-version`
    eligibility: str  # the containerd version eligibility judges by


LINES = {
    "1.7": Line(
        TOOLS / "v1.7",
        "github.com/containerd/containerd",
        "github.com/pelletier/go-toml",
        ("TestRenderedFragmentV2", "TestMergedConfig", "TestEveryKnownOption", "TestPauseImage"),
        "v2-containerd-1.7-default.toml",
        2,
        "1.7",
        "1.7.0",
    ),
    "2": Line(
        TOOLS / "v2",
        "github.com/containerd/containerd/v2",
        "github.com/pelletier/go-toml/v2",
        (
            "TestRenderedFragmentV3",
            "TestRenderedFragmentV2Migrated",
            "TestMergedConfig",
            "TestEveryKnownOption",
            "TestPauseImage",
        ),
        "v3-containerd-2.0-default.toml",
        3,
        "2",
        "2.0.0",
    ),
}
# The Go tests that prove the check can fail (misspelt keys, wrong types), with no input.
FAULT_TESTS = ("TestMisspeltKeyIsReported", "TestWrongTypeIsReported")

# A cold first run downloads the modules and compiles containerd's packages.
GO_TIMEOUT = 1800


def go_test(module: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, str], str]:
    """``go test -json`` in ``module``: exit code, top-level test -> action, and the output."""
    assert GO is not None
    result = subprocess.run(
        [GO, "test", "-count=1", "-json", *args, "./..."],
        cwd=module,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=GO_TIMEOUT,
        check=False,
    )
    actions: dict[str, str] = {}
    output: list[str] = []
    for line in result.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            output.append(line)
            continue
        test = event.get("Test")
        if test and "/" not in test and event["Action"] in {"pass", "fail", "skip"}:
            actions[test] = event["Action"]
        if event.get("Output"):
            output.append(event["Output"].rstrip("\n"))
    return result.returncode, actions, "\n".join(output) + result.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    assert wcow_main(["render", str(SAMPLES), "--out", str(out)]) == 0
    return out


def plan_handlers(rendered: Path) -> dict[str, Any]:
    handlers: dict[str, Any] = json.loads((rendered / "plan.json").read_text())["handlers"]
    return handlers


def merged_config(
    rendered: Path, tmp_path: Path, line: str
) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The agent's merge of the plan into the line's default config.toml, and the handlers it
    wrote as tomllib reads them (plan.json's shape). The layout is GKE's (kube-up's), which
    names no drop-in folder, so on 2.x too the handlers go into config.toml itself: the one
    file containerd's loader reads here (drop-ins: test_placement_loads.py)."""
    spec = LINES[line]
    config = tmp_path / "config.toml"
    shutil.copy(FIXTURES / spec.fixture, config)
    args = ["merge", "--config", str(config), "--plan", str(rendered / "plan.json")]
    args += ["--host-build", HOST_BUILD, "--containerd-version", spec.merge_flag, "--write"]
    assert agent_main([*args, "--distribution", "gke"]) == 0
    node: Any = tomllib.loads(config.read_text(encoding="utf-8"))
    for key in RUNTIMES_PATH[spec.version]:
        node = node[key]
    plan = plan_handlers(rendered)
    return config, {name: {"runtime": node[name]} for name in sorted(node) if name in plan}


def every_known_option() -> dict[str, Any]:
    """One runhcs handler setting every option of the project's table (RUNHCS_OPTIONS), with a
    non-zero value of its declared type: they must all be fields of each line's Options."""
    samples: dict[type, Any] = {bool: True, int: 2, str: "x", dict: {"io.microsoft.a": "1"}}
    options = {name: samples[spec.kind] for name, spec in RUNHCS_OPTIONS.items()}
    options["DebugType"] = 2  # an enum: ETW
    options["SandboxIsolation"] = 1  # an enum: HYPERVISOR
    return {
        "handlers": {
            "every-option": {
                "runtime": {"runtime_type": "io.containerd.runhcs.v1", "options": options}
            }
        }
    }


@pytest.mark.parametrize("line", sorted(LINES))
def test_every_rendered_handler_decodes_in_containerd(
    line: str, rendered: Path, tmp_path: Path
) -> None:
    spec = LINES[line]
    config, merged = merged_config(rendered, tmp_path, line)
    host = Host(parse_windows_build(HOST_BUILD), True, spec.eligibility)
    plan = load_plan((rendered / "plan.json").read_text(encoding="utf-8"))
    eligible, _ = classify_handlers(plan.handlers, host)
    assert sorted(merged) == sorted(eligible), "the merge did not write the eligible handlers"
    for name, entry in merged.items():
        assert entry["runtime"] == eligible[name].runtime, f"merge changed handler {name}"
    expect = tmp_path / "merged-handlers.json"
    expect.write_text(json.dumps({"handlers": merged}), encoding="utf-8")
    known = tmp_path / "every-option.json"
    known.write_text(json.dumps(every_known_option()), encoding="utf-8")
    paused = tmp_path / "paused.toml"
    text = config.read_text(encoding="utf-8")
    paused.write_text(with_pause_image(text, spec.version, PAUSE), encoding="utf-8")

    code, actions, output = go_test(
        spec.module,
        {
            "WCOW_RENDERED": str(rendered),
            "WCOW_MERGED_CONFIG": str(config),
            "WCOW_MERGED_EXPECT": str(expect),
            "WCOW_KNOWN_OPTIONS": str(known),
            "WCOW_PAUSE_CONFIG": str(paused),
            "WCOW_PAUSE_IMAGE": PAUSE,
        },
        # fed per config.toml by test_containerd_effective.py, not here
        "-skip",
        "^TestEffectiveConfig$",
    )
    assert code == 0, output
    for test in (*spec.must_pass, *FAULT_TESTS):
        assert actions.get(test) == "pass", f"{test}: {actions.get(test)}\n{output}"
    skipped = sorted(test for test, action in actions.items() if action == "skip")
    assert not skipped, f"skipped: {skipped}\n{output}"


@pytest.mark.parametrize(
    ("line", "fixture", "version"),
    [
        ("1.7", "v2-containerd-1.7-default.toml", 2),
        ("2", "v3-containerd-2.0-default.toml", 3),
        ("2", "v2-containerd-1.7-default.toml", 2),  # a 1.7 node's file, migrated by 2.x
    ],
)
def test_the_pause_image_the_agent_sets_is_the_one_containerd_runs(
    line: str, fixture: str, version: int, tmp_path: Path
) -> None:
    """``--pause-image`` writes the key of the file's schema (images.SANDBOX_IMAGE_KEYS);
    containerd's own loading must read that image from it, and not from a key of the other
    schema (which proves the check can fail)."""
    spec = LINES[line]
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    paused = tmp_path / "paused.toml"
    paused.write_text(with_pause_image(text, version, PAUSE), encoding="utf-8")
    run = ("-run", "^TestPauseImage$")
    env = {"WCOW_PAUSE_CONFIG": str(paused), "WCOW_PAUSE_IMAGE": PAUSE}
    code, actions, output = go_test(spec.module, env, *run)
    assert code == 0, output
    assert actions.get("TestPauseImage") == "pass", output

    wrong = tomllib.loads(text)
    other = SANDBOX_IMAGE_KEYS[3 if version == 2 else 2]
    node = wrong
    for key in other[:-1]:
        node = node.setdefault(key, {})
    node[other[-1]] = PAUSE
    paused.write_text(tomli_w.dumps(wrong), encoding="utf-8")
    code, actions, output = go_test(spec.module, env, *run)
    assert code != 0, output
    assert actions.get("TestPauseImage") == "fail", output
    assert f'not the "{PAUSE}" the agent set' in output, output


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_misspelt_key_or_wrong_type_in_rendered_handlers_fails(
    line: str, rendered: Path, tmp_path: Path
) -> None:
    """The same run over a plan with one key misspelt and one value of the wrong type: go test
    must fail and name both, so a pass above means the keys really arrived."""
    spec = LINES[line]
    plan = json.loads((rendered / "plan.json").read_text())
    hyperv = sorted(h for h, e in plan["handlers"].items() if e["isolation"] == "HyperV")
    misspelt, wrong = plan["handlers"][hyperv[0]], plan["handlers"][hyperv[1]]
    misspelt["runtime"]["options"]["VmProcessorCont"] = misspelt["runtime"]["options"].pop(
        "VmProcessorCount"
    )
    wrong["runtime"]["options"]["VmMemorySizeInMb"] = "2048"
    broken = tmp_path / "rendered"
    broken.mkdir()
    (broken / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    tables = {name: entry["runtime"] for name, entry in plan["handlers"].items()}
    for fragment_version in (2, 3):
        (broken / f"containerd-config-v{fragment_version}.toml").write_text(
            render_containerd_toml(tables, fragment_version), encoding="utf-8"
        )

    fragment_tests = [test for test in spec.must_pass if test.startswith("TestRenderedFragment")]
    code, actions, output = go_test(
        spec.module, {"WCOW_RENDERED": str(broken)}, "-run", f"^({'|'.join(fragment_tests)})$"
    )
    assert code != 0, output
    assert all(actions.get(test) == "fail" for test in fragment_tests), actions
    assert f'{hyperv[0]}: option "VmProcessorCont" is dropped' in output, output
    assert f'{hyperv[1]}: option "VmMemorySizeInMb" = "2048" does not decode' in output, output


# Each module that decodes with containerd's hcsshim and go-toml: the lines above, and the
# 2.3 module, which decodes the handlers of whole configs it loads (test_containerd_effective.py).
PINNED = {name: (spec.module, spec.containerd, spec.toml) for name, spec in LINES.items()} | {
    "2.3": (
        TOOLS / "v2.3",
        "github.com/containerd/containerd/v2",
        "github.com/pelletier/go-toml/v2",
    )
}


@pytest.mark.parametrize("line", sorted(PINNED))
def test_modules_decode_with_containerds_own_hcsshim_and_toml(line: str) -> None:
    """The hcsshim and go-toml the Go module builds with are the ones containerd's go.mod
    requires: a dependency that raised either would test another decoder than containerd's."""
    assert GO is not None
    module, containerd_module, toml_module = PINNED[line]

    def go(*args: str) -> str:
        result = subprocess.run(
            [GO, *args],
            cwd=module,
            capture_output=True,
            text=True,
            timeout=GO_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    containerd = go("list", "-m", "-f", "{{.Version}}", containerd_module).strip()
    required = dict(
        edge.split(" ")[1].rsplit("@", 1)
        for edge in go("mod", "graph").splitlines()
        if edge.startswith(f"{containerd_module}@{containerd} ")
    )
    for dependency in ("github.com/Microsoft/hcsshim", toml_module):
        selected = go("list", "-m", "-f", "{{.Version}}", dependency).strip()
        assert selected == required[dependency], (
            f"{module.name}: {dependency} {selected}, but containerd {containerd} "
            f"requires {required[dependency]}"
        )
