"""containerd's own manifest selection judges what a Windows node pulls: tools/containerd-pull.

The test registry (tests/registry.py) serves Windows images of builds 17763, 20348 and 26100
and indexes over them; a Go module per containerd line (1.7.35; 2.2.9, both pull paths)
resolves each reference with containerd's remotes/docker resolver, fetches it through the
handlers the CRI plugin's pull uses (client Pull: FilterPlatforms + LimitManifests; 2.1+
transfer service: the image store's ImageFilter) and selects the manifest with
images.Manifest and the Windows platform matcher of the host's build. The expectations here
are the facts docs/images.md states: a change of containerd's behaviour fails this test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.integration.test_containerd_decode import GO_TIMEOUT, go_test
from tests.registry import DOCKER_MANIFEST, Pushed, Registry, require_registry, running

GO = shutil.which("go")

pytestmark = pytest.mark.skipif(
    GO is None,
    reason="go is not on PATH: containerd's own manifest selection (tools/containerd-pull) "
    "needs the Go toolchain (1.25 or newer) and the Go module proxy",
)

TOOLS = ROOT / "tools" / "containerd-pull"
WS2019, WS2022, WS2025 = "10.0.17763", "10.0.20348", "10.0.26100"
CLIENT, TRANSFER = "client", "transfer"


@dataclass(frozen=True)
class LineModule:
    module: Path
    containerd: str  # containerd's Go module path
    version: str  # the containerd release the module pins
    platforms: str  # the containerd/platforms it builds with
    paths: tuple[str, ...]  # the pull paths its CRI plugin uses
    modfile: str = "go.mod"  # 2.0 and 2.4 build the v2 module against another containerd
    go_minimum: tuple[int, int, int] = (1, 25, 0)  # the Go its go.mod asks for

    def args(self) -> list[str]:
        return [] if self.modfile == "go.mod" else [f"-modfile={self.modfile}"]


V2 = TOOLS / "v2"
LINES = {
    "1.7": LineModule(
        TOOLS / "v1.7", "github.com/containerd/containerd", "v1.7.35", "v1.0.0-rc.1", (CLIENT,)
    ),
    "2.0": LineModule(
        V2,
        "github.com/containerd/containerd/v2",
        "v2.0.14",
        "v1.0.0-rc.1",
        (CLIENT,),
        "go.v2.0.mod",
    ),
    "2.2": LineModule(
        V2, "github.com/containerd/containerd/v2", "v2.2.9", "v1.0.0-rc.2", (CLIENT, TRANSFER)
    ),
    # The newest release, nearest to main: unpacks with OnlyOS, ignores win32k.
    "2.4": LineModule(
        V2,
        "github.com/containerd/containerd/v2",
        "v2.4.2",
        "v1.0.0-rc.5",
        (CLIENT, TRANSFER),
        "go.v2.4.mod",
        (1, 26, 6),
    ),
}


def go_version() -> tuple[int, ...]:
    assert GO is not None
    text = subprocess.run(
        [GO, "env", "GOVERSION"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    found = re.match(r"go(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    assert found is not None, text
    return tuple(int(part or 0) for part in found.groups())


def module_for(line: str) -> LineModule:
    """The line's module, skipped with the reason when this Go is older than it needs."""
    spec = LINES[line]
    if go_version() < spec.go_minimum:
        wanted = ".".join(map(str, spec.go_minimum))
        pytest.skip(f"containerd {spec.version} needs Go {wanted} or newer")
    return spec


@dataclass(frozen=True)
class Images:
    """What the registry serves (one manifest per build, each with its own config)."""

    registry: Registry
    by_build: dict[str, Pushed]  # OCI image manifests
    docker_by_build: dict[str, Pushed]  # the same builds as Docker schema 2 manifests
    index: Pushed  # OCI index: 17763, 20348, 26100 in that order
    only_2019: Pushed  # an index with the 17763 entry only
    no_platforms: Pushed  # an index of 17763, 20348 whose entries carry no platform
    docker_list: Pushed  # a Docker manifest list: 17763, 20348, 26100

    def ref(self, pushed: Pushed, tag: str = "") -> str:
        return self.registry.reference(pushed.repository, tag or pushed.digest)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    require_registry()
    with running(tmp_path_factory.mktemp("registry")) as registry:
        repo, docker_repo = "wcow/servercore", "wcow/nanoserver"
        versions = {WS2019: "10.0.17763.1234", WS2022: "10.0.20348.2655", WS2025: "10.0.26100.1742"}
        by_build = {
            build: registry.push_image(repo, version, tag="ltsc2019" if build == WS2019 else "")
            for build, version in versions.items()
        }
        docker = {
            build: registry.push_image(docker_repo, version, media_type=DOCKER_MANIFEST)
            for build, version in versions.items()
        }
        ordered = [by_build[b] for b in (WS2019, WS2022, WS2025)]
        yield Images(
            registry,
            by_build,
            docker,
            registry.push_index(repo, "multi", ordered),
            registry.push_index(repo, "only-ltsc2019", [by_build[WS2019]]),
            registry.push_index(
                repo, "no-platforms", [by_build[WS2019], by_build[WS2022]], with_platforms=False
            ),
            registry.push_index(
                docker_repo, "multi", [docker[b] for b in (WS2019, WS2022, WS2025)]
            ),
        )


def pulls(fetched: list[Pushed], selected: Pushed | None) -> dict[str, Any]:
    """Fetches exactly these image manifests and selects ``selected`` (None: not checked)."""
    return {
        "fetched": sorted(m.digest for m in fetched),
        "selected_config": None if selected is None else selected.config_digest,
        "error": "",
    }


def fails(fetched: list[Pushed], error: str) -> dict[str, Any]:
    return {"fetched": sorted(m.digest for m in fetched), "selected_config": None, "error": error}


NO_MATCH = "no match for platform in manifest"


def cases(images: Images, line: str) -> list[dict[str, Any]]:
    """The facts, per containerd line and pull path (docs/images.md, "What the tests prove")."""
    m = images.by_build
    d = images.docker_by_build

    def case(name: str, reference: str, host: str, **expect: Any) -> dict[str, Any]:
        return {"name": name, "reference": reference, "host": host, "expect": expect}

    spec = LINES[line]

    def both(
        client: dict[str, Any] | None, transfer: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The expectation per path of the Go module (transfer: the client's unless given);
        a path the line's CRI plugin does not use (2.0's transfer service) is not checked."""
        paths = {CLIENT: client, TRANSFER: client if transfer is None else transfer}
        module_paths = (CLIENT,) if spec.module.name == "v1.7" else (CLIENT, TRANSFER)
        return {p: paths[p] if p in spec.paths else None for p in module_paths}

    out = [
        # An index is matched by the host's build: WS2022 gets its own entry, and only it
        # is fetched.
        case(
            "index tag, WS2022 host",
            images.ref(images.index, "multi"),
            WS2022,
            **both(pulls([m[WS2022]], m[WS2022])),
        ),
        case(
            "index digest, WS2022 host",
            images.ref(images.index),
            WS2022,
            **both(pulls([m[WS2022]], m[WS2022])),
        ),
        case(
            "Docker manifest list, WS2022 host",
            images.ref(images.docker_list, "multi"),
            WS2022,
            **both(pulls([d[WS2022]], d[WS2022])),
        ),
        # The reference names one manifest: no platform match at all, whatever its build.
        case(
            "17763 manifest digest, WS2022 host",
            images.ref(m[WS2019]),
            WS2022,
            **both(pulls([m[WS2019]], m[WS2019])),
        ),
        case(
            "tag of the 17763 manifest, WS2022 host",
            images.ref(m[WS2019], "ltsc2019"),
            WS2022,
            **both(pulls([m[WS2019]], m[WS2019])),
        ),
        case(
            "26100 manifest digest, WS2022 host",
            images.ref(m[WS2025]),
            WS2022,
            **both(pulls([m[WS2025]], m[WS2025])),
        ),
        case(
            "17763 manifest digest, WS2025 host",
            images.ref(m[WS2019]),
            WS2025,
            **both(pulls([m[WS2019]], m[WS2019])),
        ),
        # An index without the host's build is refused at pull.
        case(
            "index of 17763 only, WS2022 host",
            images.ref(images.only_2019, "only-ltsc2019"),
            WS2022,
            **both(fails([], NO_MATCH)),
        ),
        # Below WS2022 the build must be equal.
        case(
            "index tag, WS2019 host",
            images.ref(images.index, "multi"),
            WS2019,
            **both(pulls([m[WS2019]], m[WS2019])),
        ),
    ]
    # On WS2025 both 20348 and 26100 entries match (from WS2022 on, the matcher accepts the
    # previous LTSC). The client path keeps one, the first by the comparer's order: for
    # Only() (1.7 and 2.0 on Windows) the first listed, 20348. The transfer path fetches
    # every matching entry; 2.1+ ranks by os.version on Windows, a comparer this OS cannot
    # build (see tools/containerd-pull/README.md), so its choice is not checked.
    if TRANSFER in spec.paths:
        ws2025 = both(None, pulls([m[WS2022], m[WS2025]], None))
    else:
        ws2025 = both(pulls([m[WS2022]], m[WS2022]))
    out.append(case("index tag, WS2025 host", images.ref(images.index, "multi"), WS2025, **ws2025))
    # Entries without a platform: the config is read. 1.7 compares only its OS and
    # architecture, so the first entry (17763) is taken on a WS2022 host; 2.x compares its
    # os.version too and refuses the pull (the transfer path after fetching both).
    if line == "1.7":
        no_platforms = both(pulls([m[WS2019]], m[WS2019]))
    else:
        no_platforms = both(fails([m[WS2019]], NO_MATCH), fails([m[WS2019], m[WS2022]], NO_MATCH))
    out.append(
        case(
            "index without platforms, WS2022 host",
            images.ref(images.no_platforms, "no-platforms"),
            WS2022,
            **no_platforms,
        )
    )
    return out


def run_line(
    line: str, fixture: list[dict[str, Any]], tmp_path: Path
) -> tuple[int, dict[str, str], str, Any]:
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps({"cases": fixture}), encoding="utf-8")
    result = tmp_path / "result.json"
    spec = module_for(line)
    code, actions, output = go_test(
        spec.module,
        {"WCOW_PULL_FIXTURE": str(path), "WCOW_PULL_RESULT": str(result)},
        *spec.args(),
    )
    outcome = json.loads(result.read_text()) if result.exists() else None
    return code, actions, output, outcome


@pytest.mark.parametrize("line", sorted(LINES))
def test_containerd_selects_the_manifests_the_docs_state(
    line: str, images: Images, tmp_path: Path
) -> None:
    code, actions, output, outcome = run_line(line, cases(images, line), tmp_path)
    assert code == 0, output
    assert actions.get("TestPullCases") == "pass", f"{actions}\n{output}"
    assert outcome is not None, output
    assert sorted(outcome) == sorted(c["name"] for c in cases(images, line)), output


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_wrong_expectation_fails_and_names_the_case(
    line: str, images: Images, tmp_path: Path
) -> None:
    """The same run with one fact turned round (the 17763 digest on a WS2022 host expected to
    be refused): go test must fail and name that case, so a pass above is a real check."""
    fixture = cases(images, line)
    wrong = next(c for c in fixture if c["name"] == "17763 manifest digest, WS2022 host")
    wrong["expect"] = {path: fails([], NO_MATCH) for path in wrong["expect"]}
    code, actions, output, _ = run_line(line, fixture, tmp_path)
    assert code != 0, output
    assert actions.get("TestPullCases") == "fail", actions
    assert "17763 manifest digest, WS2022 host" in output, output
    assert f"expected one containing {NO_MATCH!r}".replace("'", '"') in output, output


@pytest.mark.parametrize("line", sorted(LINES))
def test_modules_pin_the_containerd_and_platforms_the_docs_name(line: str) -> None:
    """1.7.35 and 2.2.9 with the containerd/platforms each builds against: 2.2.9's own
    requirement; for 1.7 v1.0.0-rc.1, whose Windows rule is v0.2.1's (tools/containerd-pull
    README): a dependency that moved either would test another matcher than the docs cite."""
    assert GO is not None
    spec = module_for(line)

    def version(module: str) -> str:
        result = subprocess.run(
            [GO, "list", *spec.args(), "-m", "-f", "{{.Version}}", module],
            cwd=spec.module,
            capture_output=True,
            text=True,
            timeout=GO_TIMEOUT,
            check=False,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert version(spec.containerd) == spec.version
    assert version("github.com/containerd/platforms") == spec.platforms
