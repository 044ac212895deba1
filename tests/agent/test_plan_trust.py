"""A forged plan cannot make a node run anything a valid profile could not.

The plan's hash is unkeyed: whoever can write the plan ConfigMap (or hand ``merge`` a file)
re-hashes a forged plan. Each forgery below is re-hashed as an attacker would; the agent
refuses it when it loads the plan (``merge --write`` and the ``run`` loop), names the
handler, the field and the value (escaped, bounded), and config.toml stays as it was. And
every plan the renderer makes from valid profiles is accepted (property test).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.agent.conftest import DEFAULT_17, forge, hyperv, make_plan, process
from tests.agent.fakes import CONFIGS, FakeCluster, FakeNode
from tests.agent.test_runner import make_loop, sample
from tests.conftest import profile_document
from wcow_agent.cli import main as agent_main
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.catalog.runhcs_options import NCPROXY_PIPE_PATTERN
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.v1alpha1 import IMAGE_REFERENCE_PATTERN, RUNTIME_PATH_PATTERN
from wcow_contract.wire.plan import dump_plan, plan_for, plan_hash

Entry = dict[str, Any]
EVIL_EXE = r"C:\Windows\Temp\evil.exe"
UNC = r"\\attacker.example\share\boot"


def forged(change: Callable[[Entry], None]) -> str:
    """The plan of one Hyper-V profile with ``change`` made to its entry, re-hashed."""
    entry = make_plan(hyperv()).handlers["hv"].document()
    change(entry)
    return forge({"hv": entry})


def runtime_key(key: str, value: Any) -> Callable[[Entry], None]:
    return lambda entry: entry["runtime"].__setitem__(key, value)


def option(key: str, value: Any, *, in_spec: bool) -> Callable[[Entry], None]:
    """Set a runhcs option in the rendered table, and also in the carried spec (so that the
    profile model is what has to refuse it) when ``in_spec``."""

    def change(entry: Entry) -> None:
        entry["runtime"]["options"][key] = value
        if in_spec:
            entry["spec"].setdefault("containerd", {}).setdefault("options", {})[key] = value

    return change


def containerd_field(field: str, key: str, value: Any) -> Callable[[Entry], None]:
    def change(entry: Entry) -> None:
        entry["runtime"][key] = value
        entry["spec"].setdefault("containerd", {})[field] = value

    return change


def default_annotation(key: str, value: str, *, in_spec: bool) -> Callable[[Entry], None]:
    def change(entry: Entry) -> None:
        entry["runtime"]["options"].setdefault("DefaultContainerAnnotations", {})[key] = value
        if in_spec:
            options = entry["spec"].setdefault("containerd", {}).setdefault("options", {})
            options.setdefault("DefaultContainerAnnotations", {})[key] = value

    return change


def canary_image(value: str) -> Callable[[Entry], None]:
    def change(entry: Entry) -> None:
        entry["canary"]["image"] = value
        entry["spec"]["canary"] = {"image": value}

    return change


# (id, the forgery, the field the refusal names after "handlers.hv.", text it must show)
FORGERIES: list[tuple[str, Callable[[Entry], None], str, str]] = [
    # Runtime keys containerd reads and the operator never renders.
    *(
        (f"runtime-{key}", runtime_key(key, value), f"runtime.{key}", "never renders")
        for key, value in [
            ("base_runtime_spec", r"C:\Windows\Temp\spec.json"),
            ("cni_conf_dir", r"\\attacker.example\share\cni"),
            ("privileged_without_host_devices", True),
            ("snapshotter", "evil"),
            ("sandbox_mode", "shim"),
        ]
    ),
    # runtime_path: in the table only (the re-render says so), and in the spec as well (the
    # model refuses it: containerd would run the file as SYSTEM).
    ("path-table", runtime_key("runtime_path", EVIL_EXE), "runtime.runtime_path", "evil.exe"),
    (
        "path-spec",
        containerd_field("runtimePath", "runtime_path", EVIL_EXE),
        "spec.containerd.runtimePath",
        "evil.exe",
    ),
    (
        "path-unc-spec",
        containerd_field(
            "runtimePath", "runtime_path", r"\\attacker.example\s\containerd-shim-runhcs-v1.exe"
        ),
        "spec.containerd.runtimePath",
        "attacker.example",
    ),
    (
        "runtime-type-spec",
        containerd_field("runtimeType", "runtime_type", "io.containerd.evil.v1"),
        "spec.containerd.runtimeType",
        "io.containerd.evil.v1",
    ),
    # runhcs paths on a share, and a pipe on another machine.
    (
        "bootfiles-spec",
        option("BootFilesRootPath", UNC, in_spec=True),
        "spec.containerd.options.BootFilesRootPath",
        "LCOW",
    ),
    (
        "bootfiles-table",
        option("BootFilesRootPath", UNC, in_spec=False),
        "runtime.options.BootFilesRootPath",
        "attacker.example",
    ),
    (
        "gpuvhd-spec",
        option("GPUVHDPath", UNC, in_spec=True),
        "spec.containerd.options.GPUVHDPath",
        "GPUVHDPath",
    ),
    (
        "ncproxy-spec",
        option("NCProxyAddr", r"\\attacker.example\pipe\ncproxy", in_spec=True),
        "spec.containerd.options.NCProxyAddr",
        "not a named pipe on this host",
    ),
    (
        "ncproxy-table",
        option("NCProxyAddr", r"\\.\pipe\ncproxy-ttrpc", in_spec=False),
        "runtime.options.NCProxyAddr",
        "never renders",
    ),
    # Defaults for every pod's spec: the HostProcess family, and VM sizing past the
    # admission webhook's bounds.
    (
        "hostprocess-spec",
        default_annotation("microsoft.com/hostprocess-inherit-user", "true", in_spec=True),
        "spec.containerd.options.DefaultContainerAnnotations",
        "hostprocess-inherit-user",
    ),
    (
        "vm-size-spec",
        default_annotation(
            "io.microsoft.virtualmachine.computetopology.processor.count", "64", in_spec=True
        ),
        "spec.containerd.options.DefaultContainerAnnotations",
        "spec.vm.processorCount",
    ),
    (
        "vm-size-table",
        default_annotation(
            "io.microsoft.virtualmachine.computetopology.memory.sizeinmb", "1048576", in_spec=False
        ),
        "runtime.options.DefaultContainerAnnotations",
        "never renders",
    ),
    # Same JSON value, another type: containerd would decode `true`, not 1.
    (
        "type",
        lambda entry: entry["runtime"]["options"].__setitem__("SandboxIsolation", True),
        "runtime.options.SandboxIsolation",
        "True",
    ),
    # The VM the canary checks for, and the isolation eligibility is decided by.
    (
        "vm-entry",
        lambda entry: entry["vm"].__setitem__("memoryMB", 65536),
        "vm.memoryMB",
        "65536",
    ),
    ("isolation", lambda entry: entry.__setitem__("isolation", "Process"), "isolation", "Process"),
    # An entry without the spec it was rendered from cannot be checked.
    ("no-spec", lambda entry: entry.pop("spec"), "spec", "missing"),
    # Attacker text in the refusal comes back escaped.
    (
        "hostile-image",
        canary_image("evil\n\x1b[2J[plugins]\nx"),
        "spec.canary.image",
        "\\x1b[2J",
    ),
]


@pytest.mark.parametrize(
    ("change", "field", "shows"),
    [pytest.param(change, field, shows, id=name) for name, change, field, shows in FORGERIES],
)
def test_a_forged_entry_is_refused_naming_handler_field_and_value(
    change: Callable[[Entry], None], field: str, shows: str
) -> None:
    with pytest.raises(PlanError) as raised:
        load_plan(forged(change), "plan.json")
    message = str(raised.value)
    assert message.startswith(f"plan.json: handlers.hv.{field}: "), message
    assert shows in message, message
    assert message.isprintable(), "attacker text must come back escaped"
    assert len(message) < 1200


@pytest.mark.parametrize(
    ("change", "field"),
    [pytest.param(change, field, id=name) for name, change, field, _ in FORGERIES],
)
def test_merge_write_refuses_a_forged_plan_and_leaves_config_toml_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[Entry], None], field: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(forged(change), encoding="utf-8")
    config = tmp_path / "config.toml"
    shutil.copy(CONFIGS / "v2-containerd-1.7-default.toml", config)

    code = agent_main(
        [
            *("merge", "--config", str(config), "--plan", str(plan)),
            *("--host-build", "10.0.20348", "--write"),
        ]
    )

    assert code == 1
    assert f"handlers.hv.{field}: " in capsys.readouterr().err
    assert config.read_text(encoding="utf-8") == DEFAULT_17
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "plan.json"]


def test_the_run_loop_refuses_a_forged_plan_and_keeps_the_node_as_it_was(
    node: FakeNode, cluster: FakeCluster
) -> None:
    cluster.set_plan(make_plan(hyperv()))
    loop = make_loop(node, cluster)
    loop.cycle()
    config = node.config.read_bytes()
    forgery = forged(runtime_key("runtime_path", EVIL_EXE))
    loop.on_plan(cluster.set_plan(json.loads(forgery)))

    loop.cycle()

    assert node.config.read_bytes() == config
    assert len(node.restarts) == 1, "containerd was restarted for the forged plan"
    assert cluster.labels["runtime.wcow.dev/hv"] == "ready"
    assert any(
        reason == "PlanUnusable" and "handlers.hv.runtime.runtime_path" in message
        for _, reason, message, _ in cluster.events
    )
    assert sample(loop, "wcow_agent_plan_errors_total") == 1


def test_a_forged_runtimes_path_is_refused_though_the_agent_never_reads_it() -> None:
    plan = make_plan(hyperv()).document()
    plan["runtimesPath"]["2"] = ["plugins", "evil"]
    body = {key: value for key, value in plan.items() if key != "hash"}
    plan["hash"] = plan_hash(body)

    with pytest.raises(PlanError, match=r"^plan: runtimesPath\.2"):
        load_plan(json.dumps(plan))


def test_the_canary_image_runs_as_container_user(tmp_path: Path) -> None:
    """The image is the plan's, and CRI starts it outside any admission policy: it runs as
    the unprivileged ContainerUser, not as the image's default user."""
    node = FakeNode(tmp_path, config_text=DEFAULT_17)
    canary = {"image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}
    node.agent().reconcile(make_plan(hyperv(canary=canary)))

    (created,) = [doc for kind, doc in node.crictl_inputs if kind == "create"]
    assert created["windows"] == {"security_context": {"run_as_username": "ContainerUser"}}
    assert "mounts" not in created


# -- every plan the renderer makes is accepted ---------------------------------------------

_builds = st.sampled_from(["ltsc2019", "ltsc2022", "10.0.20348", "ltsc2025", "1809"])
_patterns = st.lists(
    st.sampled_from(
        [
            "io.microsoft.virtualmachine.*",
            "io.microsoft.container.*",
            "io.microsoft.virtualmachine.computetopology.processor.count",
            "example.com/*",
        ]
    ),
    max_size=3,
    unique=True,
)
_allowed_defaults = st.dictionaries(
    st.sampled_from(
        [
            "io.microsoft.container.processdumplocation",
            "io.microsoft.wcow.processdumptype",
            "io.microsoft.virtualmachine.fileshares.disablewritable",
            "microsoft.com/disable-hostprocess-container",
            "io.microsoft.disable-unsafe-operations",
        ]
    ),
    st.text(max_size=12),
    max_size=2,
)


@st.composite
def _vm(draw: st.DrawFn) -> dict[str, Any]:
    vm: dict[str, Any] = {}
    processors = draw(st.integers(1, 16))
    memory = draw(st.integers(128, 8192)) * 2
    if draw(st.booleans()):
        vm["processorCount"] = processors
    if draw(st.booleans()):
        vm["memoryMB"] = memory
    optional = {
        "processorLimit": st.integers(1, 100000),
        "processorWeight": st.integers(1, 10000),
        "fullyPhysicallyBacked": st.booleans(),
        "scaleCpuLimitsToSandbox": st.booleans(),
        "inheritHostTimezone": st.booleans(),
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            vm[name] = draw(values)
    if draw(st.booleans()):
        vm["sizing"] = "FromPodLimits"
        vm["maxProcessorCount"] = max(processors, 2) + draw(st.integers(0, 8))
        vm["maxMemoryMB"] = max(memory, 1024) + 2 * draw(st.integers(0, 512))
    return vm


@st.composite
def _containerd(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["runtimePath"] = draw(st.from_regex(RUNTIME_PATH_PATTERN, fullmatch=True))
    if draw(st.booleans()):
        spec["debug"] = draw(st.booleans())
    if draw(st.booleans()):
        spec["debugType"] = draw(st.sampled_from(["Npipe", "Etw"]))
    if draw(st.booleans()):
        spec["logLevel"] = draw(st.sampled_from(["trace", "info", "warning", "panic"]))
    if draw(st.booleans()):
        spec["ioRetryTimeoutSeconds"] = draw(st.integers(0, 86400))
    options: dict[str, Any] = {}
    if draw(st.booleans()):
        options["NCProxyAddr"] = draw(st.from_regex(NCPROXY_PIPE_PATTERN, fullmatch=True))
    if draw(st.booleans()):
        options["ScrubLogs"] = draw(st.booleans())
    defaults = draw(_allowed_defaults)
    if defaults:
        options["DefaultContainerAnnotations"] = defaults
    if options:
        spec["options"] = options
    return spec


@st.composite
def profile_documents(draw: st.DrawFn, name: str) -> dict[str, Any]:
    isolation = draw(st.sampled_from(["HyperV", "Process"]))
    spec: dict[str, Any] = {}
    if isolation == "HyperV" or draw(st.booleans()):
        spec["windowsBuild"] = draw(_builds)
    if isolation == "HyperV" and draw(st.booleans()):
        spec["vm"] = draw(_vm())
    if draw(st.booleans()):
        spec["annotations"] = {"pod": draw(_patterns), "container": draw(_patterns)}
    spec["containerd"] = draw(_containerd())
    if draw(st.booleans()):
        spec["canary"] = {
            "enabled": draw(st.booleans()),
            "timeoutSeconds": draw(st.integers(10, 1800)),
            "image": draw(st.from_regex(IMAGE_REFERENCE_PATTERN, fullmatch=True)),
        }
    if draw(st.booleans()):
        spec["rollout"] = {"maxUnavailable": draw(st.integers(1, 5))}
    document = profile_document(name, isolation=isolation, **spec)
    if "windowsBuild" not in spec:
        document["spec"].pop("windowsBuild", None)
    return document


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(profile_documents(name) for name in names))
    )
)
def test_every_plan_rendered_from_valid_profiles_is_accepted(
    documents: tuple[dict[str, Any], ...],
) -> None:
    try:
        profiles = [parse_profile(document) for document in documents]
    except ProfileInvalidError:
        assume(False)
        return
    plan = plan_for(profiles)

    assert load_plan(dump_plan(plan)) == plan


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_change_to_a_rendered_entry_is_refused(data: st.DataObject) -> None:
    """Whatever value of an entry is changed (to one of another type or another value), the
    plan is refused: the entry is exactly the rendering of its spec, or nothing. Changing the
    spec alone is refused too (the rendered parts no longer match it)."""
    plan = make_plan(
        hyperv(
            vm={"processorCount": 2, "memoryMB": 2048, "processorLimit": 50000},
            containerd={"options": {"NCProxyAddr": r"\\.\pipe\ncproxy-ttrpc"}},
        ),
        process("proc"),
    )
    handler = data.draw(st.sampled_from(sorted(plan.handlers)))
    # All but the profile's name, generation and uid: they say which object the entry came
    # from (the agent reports the generation back) and configure nothing.
    leaves = [
        path
        for path in _leaves(plan.handlers[handler].document())
        if path[0] not in ("profile", "generation", "uid")
    ]
    path = data.draw(st.sampled_from(leaves))
    value = data.draw(
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.just([]))
    )
    entry = plan.handlers[handler].document()
    node = entry
    for key in path[:-1]:
        node = node[key]
    before = node[path[-1]]
    assume(type(before) is not type(value) or before != value)
    node[path[-1]] = value

    with pytest.raises(PlanError, match=rf"handlers\.{handler}\."):
        load_plan(forge({**plan.document()["handlers"], handler: entry}))


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Any:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list) and node:
        for index, value in enumerate(node):
            yield from _leaves(value, (*path, index))
    elif path:
        yield path


def test_the_process_profile_entry_carries_only_what_a_node_needs() -> None:
    plan = make_plan(process("proc", scheduling={"tolerations": [{"operator": "Exists"}]}))
    assert plan.handlers["proc"].spec == {"isolation": "Process"}
