"""The images cannot be built here; check what can be: pinned base images, a non-root user for
Linux, entrypoints that are the project's console scripts, and the image contents' claims."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCKER = ROOT / "deploy" / "docker"
OPERATOR = DOCKER / "operator.Dockerfile"
AGENT = DOCKER / "agent.windows.Dockerfile"
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"
]["scripts"]
HOSTPROCESS_BASE = "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image"


@dataclass
class Instruction:
    keyword: str
    value: str


def parse(path: Path) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1].strip()}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            keyword, _, value = pending.strip().partition(" ")
            instructions.append(Instruction(keyword.upper(), value.strip()))
            pending = ""
    return instructions


def stages(path: Path) -> list[tuple[str, list[Instruction]]]:
    """(base image with ARG defaults substituted, instructions) per stage."""
    defaults: dict[str, str] = {}
    result: list[tuple[str, list[Instruction]]] = []
    for instruction in parse(path):
        if instruction.keyword == "ARG" and not result:
            name, _, default = instruction.value.partition("=")
            defaults[name] = default
        elif instruction.keyword == "FROM":
            words = [w for w in instruction.value.split() if not w.startswith("--platform")]
            image = re.sub(
                r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults[m.group(1) or m.group(2)], words[0]
            )
            result.append((image, []))
        elif result:
            result[-1][1].append(instruction)
    return result


def _pinned(image: str) -> bool:
    """A digest, or a tag naming an exact release (3.11.13-slim-bookworm, v1.0.0), never a
    moving one (latest, 3.11-slim, 3)."""
    if re.search(r"@sha256:[a-f0-9]{64}$", image):
        return True
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    return bool(re.match(r"^v?\d+\.\d+\.\d+", tag))


@pytest.mark.parametrize("dockerfile", [OPERATOR, AGENT], ids=lambda p: p.name)
def test_every_base_image_is_pinned(dockerfile: Path) -> None:
    for image, _ in stages(dockerfile):
        if image in {"build"}:  # a previous stage
            continue
        assert _pinned(image), f"{dockerfile.name}: base image {image!r} is not pinned"


def test_pin_check_refuses_moving_tags() -> None:
    assert not _pinned("python:3.11-slim")
    assert not _pinned("python:latest")
    assert not _pinned("python")
    assert _pinned("python:3.11.13-slim-bookworm")
    assert _pinned("python@sha256:" + "0" * 64)


def _final(dockerfile: Path) -> list[Instruction]:
    return stages(dockerfile)[-1][1]


def test_operator_image_runs_as_a_numeric_non_root_user() -> None:
    users = [i.value for i in _final(OPERATOR) if i.keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user.isdigit(), "runAsNonRoot can only verify a numeric UID"
    assert int(user) != 0


def test_operator_user_is_the_one_the_chart_runs_as() -> None:
    import yaml

    values = yaml.safe_load(
        (ROOT / "charts" / "wcow-runtime" / "values.yaml").read_text(encoding="utf-8")
    )
    pod = values["operator"]["podSecurityContext"]
    user = next(i.value for i in reversed(_final(OPERATOR)) if i.keyword == "USER")
    assert user == f"{pod['runAsUser']}:{pod['runAsGroup']}"


def _entrypoint(dockerfile: Path) -> list[str]:
    values = [i.value for i in _final(dockerfile) if i.keyword == "ENTRYPOINT"]
    assert values, f"{dockerfile.name} has no ENTRYPOINT"
    entrypoint: list[str] = json.loads(values[-1])  # exec form: no shell in between
    return entrypoint


def test_operator_entrypoint_is_the_console_script() -> None:
    assert _entrypoint(OPERATOR) == ["wcow-operator"]
    assert "wcow-operator" in SCRIPTS


def test_agent_entrypoint_runs_the_console_script_target() -> None:
    """The embeddable Python has no console-script launchers: the entrypoint calls the
    function pyproject.toml names for wcow-agent."""
    module, function = SCRIPTS["wcow-agent"].split(":")
    entrypoint = _entrypoint(AGENT)
    assert entrypoint[0] == "python\\python.exe"
    assert entrypoint[1] == "-c"
    assert f"from {module} import {function}" in entrypoint[2]
    assert f"sys.exit({function}())" in entrypoint[2]


def test_agent_image_is_a_hostprocess_image() -> None:
    image, _ = stages(AGENT)[-1]
    assert image.startswith(HOSTPROCESS_BASE + ":")


def test_images_install_locked_dependencies_only() -> None:
    for dockerfile in (OPERATOR, AGENT):
        text = " ".join(i.value for _, stage in stages(dockerfile) for i in stage)
        assert "uv export --frozen --no-dev" in text, dockerfile.name
        assert "--require-hashes" in text, dockerfile.name


def test_operator_never_imports_the_agent_it_leaves_out() -> None:
    """The operator image removes wcow_agent; that is safe only while nothing imports it."""
    text = " ".join(i.value for _, stage in stages(OPERATOR) for i in stage)
    assert "site-packages/wcow_agent" in text
    for source in (ROOT / "operator" / "wcow_operator").rglob("*.py"):
        assert not re.search(
            r"^\s*(from|import)\s+wcow_agent", source.read_text(encoding="utf-8"), re.M
        ), source


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
AGENT_PACKAGES = (
    ROOT / "contract" / "wcow_contract",
    ROOT / "support" / "wcow_support",
    ROOT / "node-agent" / "wcow_agent",
)
# What only the operator needs; the agent's image must not carry them.
OPERATOR_ONLY = {"kopf", "cryptography"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _agent_closure() -> set[str]:
    """Every distribution the image installs: the `agent` group and what uv.lock says each
    of them needs (the `uv export --only-group agent` of the Dockerfile)."""
    packages = {package["name"]: package for package in LOCK["package"]}
    todo = [_name(r) for r in PROJECT["dependency-groups"]["agent"]]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [d["name"] for d in packages[name].get("dependencies", [])]
    return found


def test_agent_image_installs_the_agent_group_and_drops_the_operator() -> None:
    text = " ".join(i.value for _, stage in stages(AGENT) for i in stage)
    assert "uv export --frozen --no-dev --only-group agent --no-emit-project" in text
    assert "rm -rf /out/python/Lib/site-packages/wcow_operator " in text
    copied = {i.value.split()[0] for i in stages(AGENT)[0][1] if i.keyword == "COPY"}
    assert {"contract", "support", "node-agent"} <= copied


def test_agent_group_is_what_the_agent_and_the_contract_import() -> None:
    """The group names each third-party distribution wcow_agent, wcow_contract or
    wcow_support imports, with the project's own version bounds, and nothing else."""
    from tests.delivery.test_dependencies import imported_distributions

    group = {_name(r): r for r in PROJECT["dependency-groups"]["agent"]}
    assert set(group) == imported_distributions(AGENT_PACKAGES)
    assert set(group.values()) <= set(PROJECT["project"]["dependencies"])


def test_agent_image_carries_neither_kopf_nor_cryptography() -> None:
    closure = _agent_closure()
    assert "kubernetes" in closure  # the walk through uv.lock found the dependencies
    assert not closure & OPERATOR_ONLY, closure & OPERATOR_ONLY


def test_the_agent_runs_with_only_what_its_image_installs() -> None:
    """Import every module of wcow_agent (and so wcow_contract) in a fresh interpreter that
    refuses any third-party module outside the image's distributions, and wcow_operator."""
    providers: dict[str, list[str]] = importlib.metadata.packages_distributions()
    allowed = _agent_closure()
    refused = sorted(
        module
        for module, dists in providers.items()
        if not {_name(d) for d in dists} & allowed and module.isidentifier()
    )
    refused = sorted({*refused, "wcow_operator"} - {"wcow_agent", "wcow_contract", "wcow_support"})
    script = f"""
import importlib, importlib.abc, pkgutil, sys
REFUSED = set({refused!r})
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"the agent's image has no {{name}}")
        return None
sys.meta_path.insert(0, Refuse())
import wcow_agent
for module in pkgutil.walk_packages(wcow_agent.__path__, "wcow_agent."):
    importlib.import_module(module.name)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


CRICTL_MODULE = ROOT / "tools" / "crictl"


def _crictl_pin() -> str:
    """The cri-tools version tools/crictl/go.mod pins (with its checksum in go.sum)."""
    mod = (CRICTL_MODULE / "go.mod").read_text(encoding="utf-8")
    match = re.search(r"^\s*sigs\.k8s\.io/cri-tools (v\d+\.\d+\.\d+)\b", mod, re.M)
    assert match, "tools/crictl/go.mod pins no sigs.k8s.io/cri-tools version"
    assert re.search(r"^tool sigs\.k8s\.io/cri-tools/cmd/crictl$", mod, re.M)
    assert "replace" not in mod, "crictl is built from the module as published"
    checksums = (CRICTL_MODULE / "go.sum").read_text(encoding="utf-8")
    assert f"sigs.k8s.io/cri-tools {match.group(1)} h1:" in checksums
    return match.group(1)


def test_agent_image_builds_crictl_from_the_pinned_module() -> None:
    """No node needs crictl: the image carries its own, compiled for windows/amd64 from the
    module pinned in tools/crictl (go.mod and go.sum only; never a downloaded binary), with
    cri-tools' version string taken from that pin."""
    assert _crictl_pin() == "v1.37.0"
    built = [(image, stage) for image, stage in stages(AGENT) if image.startswith("golang:")]
    assert len(built) == 1, "one Go stage builds crictl"
    image, stage = built[0]
    assert _pinned(image)
    copies = [i.value for i in stage if i.keyword == "COPY"]
    assert copies == ["tools/crictl/go.mod tools/crictl/go.sum ./"]
    run = " ".join(i.value for i in stage if i.keyword == "RUN")
    for needed in (
        "GOOS=windows",
        "GOARCH=amd64",
        "GOTOOLCHAIN=local",
        "go build -mod=readonly -trimpath",
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=${version}",
        "go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/cri-tools",
        "-o /out/crictl/crictl.exe sigs.k8s.io/cri-tools/cmd/crictl",
    ):
        assert needed in run, needed
    everything = " ".join(i.value for _, s in stages(AGENT) for i in s)
    assert not re.search(r"crictl-v?[\d.]+-windows|cri-tools/releases", everything)
    final = [i.value for i in _final(AGENT) if i.keyword == "COPY"]
    assert "--from=crictl /out/crictl /crictl" in final


def test_agent_defaults_to_the_crictl_its_image_carries() -> None:
    """Where the image puts crictl is where the agent looks for it first."""
    from wcow_agent.layouts.presets import IMAGE_CRICTL

    final = [i.value for i in _final(AGENT) if i.keyword == "COPY"]
    target = next(v.split()[-1] for v in final if v.startswith("--from=crictl "))
    assert target.strip("/").replace("/", "\\") + "\\crictl.exe" == IMAGE_CRICTL
