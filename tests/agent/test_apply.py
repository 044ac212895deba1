"""One reconcile on a faked Windows node: what gets written, restarted, proven, refused."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tests.agent.conftest import DEFAULT_17, hyperv, make_plan, process
from tests.agent.fakes import CONFIGS, FakeNode
from wcow_agent.config.file_set import text_hash
from wcow_agent.config.merge_decision import MARKER
from wcow_agent.config.state import load_state
from wcow_agent.host.computecore import GENERIC_ALL
from wcow_agent.simulator.cri import Sandbox

V2_PATH = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")


def runtimes(text: str | None) -> dict[str, Any]:
    assert text is not None
    node: Any = tomllib.loads(text)
    for name in V2_PATH:
        node = node.get(name, {})
    return dict(node)


def fresh_node(root: Path) -> FakeNode:
    root.mkdir()
    return FakeNode(root, config_text=DEFAULT_17)


def runp_handlers(node: FakeNode) -> list[str]:
    return [call[call.index("--runtime") + 1] for call in node.crictl_calls if "runp" in call]


def test_first_apply_writes_once_restarts_once_and_proves_each_handler(node: FakeNode) -> None:
    plan = make_plan(hyperv(), process())
    report = node.agent().reconcile(plan)

    assert report.result == "applied"
    assert report.restarts == ["apply"]
    assert {h: (o.state, o.reason) for h, o in (report.handlers or {}).items()} == {
        "hv": ("Ready", "CanaryPassed"),
        "proc": ("Ready", "CanaryPassed"),
    }
    # containerd now runs the merged file, which holds both handlers next to the defaults.
    assert node.running_text == node.disk_text()
    loaded = runtimes(node.running_text)
    assert loaded["hv"] == plan.handlers["hv"].runtime
    assert {"runhcs-wcow-process", "runhcs-wcow-hypervisor", "hv", "proc"} <= set(loaded)
    assert (node.root / "config.toml.wcow-backup").read_text() == DEFAULT_17
    # The node's containerd checked the candidate before it replaced anything.
    assert len(node.dump_calls) == 1
    assert node.dump_calls[0] == node.disk_text()
    assert node.ops.index("containerd config dump") < node.ops.index("containerd restart")
    # One canary per handler, with that handler, cleaned up afterwards.
    assert sorted(runp_handlers(node)) == ["hv", "proc"]
    assert node.canary_sandboxes() == []
    assert node.systems == {}
    node.computecore.assert_clean()
    hv = next(c for c in report.canaries if c.handler == "hv")
    assert hv.observed == {"memoryMB": 2048}


def test_rerun_writes_nothing_restarts_nothing_and_reruns_no_canary(node: FakeNode) -> None:
    plan = make_plan(hyperv(), process())
    node.agent().reconcile(plan)
    written = node.config.read_bytes()
    state_before = (node.root / "config.toml.wcow-state.json").read_bytes()
    calls = len(node.crictl_calls)

    report = node.agent().reconcile(plan)  # a new agent process, same node

    assert report.result == "unchanged"
    assert report.restarts == []
    assert node.config.read_bytes() == written
    assert (node.root / "config.toml.wcow-state.json").read_bytes() == state_before
    assert runp_handlers(node)[2:] == []
    # Reads only: CRI status, leftover sandboxes, and (a new process) the pause image's status.
    reads = ("info", "pods", "inspecti")
    assert all(c[c.index("--timeout") + 2] in reads for c in node.crictl_calls[calls:])
    assert {h: o.reason for h, o in (report.handlers or {}).items()} == {
        "hv": "CanaryPassed",
        "proc": "CanaryPassed",
    }
    assert all(o.carried for o in (report.handlers or {}).values())


def test_changing_one_profile_restarts_once_and_proves_only_that_handler(node: FakeNode) -> None:
    agent = node.agent()
    agent.reconcile(make_plan(hyperv(), process()))
    node.crictl_calls.clear()

    report = agent.reconcile(
        make_plan(hyperv(vm={"processorCount": 4, "memoryMB": 4096}), process())
    )

    assert report.restarts == ["apply"]
    assert runp_handlers(node) == ["hv"]
    assert runtimes(node.running_text)["hv"]["options"]["VmMemorySizeInMb"] == 4096
    assert report.canaries[0].observed == {"memoryMB": 4096}


def test_handlers_that_leave_the_plan_are_removed_in_one_restart(node: FakeNode) -> None:
    agent = node.agent()
    agent.reconcile(make_plan(hyperv("a"), hyperv("b"), process()))
    node.restarts.clear()

    report = agent.reconcile(make_plan(process()))

    assert sorted(report.removed) == ["a", "b"]
    assert len(node.restarts) == 1
    assert set(report.handlers or {}) == {"proc"}
    assert "a" not in runtimes(node.running_text)
    assert "b" not in runtimes(node.running_text)
    # The last handler going restores the file byte for byte.
    agent.reconcile(make_plan())
    assert node.config.read_text() == DEFAULT_17
    assert not (node.root / "config.toml.wcow-original").exists()


def test_ineligible_handlers_are_reported_and_never_written(tmp_path: Any) -> None:
    node = FakeNode(tmp_path, build=17763, hyperv=False, config_text=DEFAULT_17)
    plan = make_plan(hyperv("hv2022"), process("p2022", windowsBuild="ltsc2022"), process("any"))

    report = node.agent().reconcile(plan)

    outcomes = report.handlers or {}
    assert (outcomes["hv2022"].state, outcomes["hv2022"].reason) == (
        "NotEligible",
        "HyperVUnavailable",
    )
    assert (outcomes["p2022"].state, outcomes["p2022"].reason) == (
        "NotEligible",
        "ProcessBuildMismatch",
    )
    assert outcomes["any"].state == "Ready"
    assert set(runtimes(node.disk_text())) == {
        "runhcs-wcow-hypervisor",
        "runhcs-wcow-process",
        "any",
    }

    newer = fresh_node(tmp_path / "b")
    report = newer.agent().reconcile(make_plan(hyperv("hv2025", windowsBuild="ltsc2025")))
    assert (report.handlers or {})["hv2025"].reason == "HostBuildTooOld"
    assert newer.restarts == []
    assert newer.disk_text() == DEFAULT_17


def test_a_users_table_with_the_same_name_is_a_conflict_and_left_alone(tmp_path: Any) -> None:
    original = (CONFIGS / "v2-user-runtimes.toml").read_text()
    node = FakeNode(tmp_path, config_text=original)

    report = node.agent().reconcile(make_plan(hyperv("team-secure"), process()))

    outcome = (report.handlers or {})["team-secure"]
    assert (outcome.state, outcome.reason) == ("Conflict", "ConflictingTable")
    assert "did not write" in outcome.message
    loaded = runtimes(node.disk_text())
    assert loaded["team-secure"] == runtimes(original)["team-secure"]
    assert (report.handlers or {})["proc"].state == "Ready"
    assert runp_handlers(node) == ["proc"]


def test_a_schema_1_config_is_merged_in_its_own_names_on_containerd_1_7(tmp_path: Any) -> None:
    """containerd 1.7 loads a schema-1 file natively (AKS WS2022, kube-up): the handlers go
    into it under `plugins.cri`, no `version` is added, and uninstalling gives it back."""
    original = (CONFIGS / "v1-legacy.toml").read_text()
    node = FakeNode(tmp_path, config_text=original)

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "applied"
    assert (report.handlers or {})["hv"].state == "Ready"
    merged = tomllib.loads(node.disk_text() or "")
    assert "version" not in merged
    assert "hv" in merged["plugins"]["cri"]["containerd"]["runtimes"]
    assert report.placement is not None
    assert (report.placement.way, report.placement.reason) == ("merge", "Containerd1Merge")
    node.agent().uninstall()
    assert node.disk_text() == original


def test_a_schema_1_config_on_containerd_2_2_is_refused_and_nothing_happens(
    tmp_path: Any,
) -> None:
    """containerd 2.0-2.2 load a schema-1 file without any of its CRI settings: the agent
    does not write there, and says why on each handler."""
    original = (CONFIGS / "v1-legacy.toml").read_text()
    node = FakeNode(tmp_path, config_text=original, containerd_version="2.2.7")

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "refused"
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "SchemaV1Lost")
    assert "containerd config migrate" in outcome.message
    assert node.disk_text() == original
    assert node.restarts == []
    assert ("SchemaV1Lost", outcome.message, True) in report.events


def test_missing_config_is_seeded_from_containerd_config_default(tmp_path: Any) -> None:
    node = FakeNode(tmp_path)  # no config.toml: containerd runs on built-in defaults
    assert not node.config.exists()

    nothing = node.agent().reconcile(make_plan())
    assert not node.config.exists(), "never create config.toml when there is nothing to add"

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "applied"
    assert "containerd config default" in node.ops
    written = node.disk_text() or ""
    assert written.startswith(DEFAULT_17.split("\n[", 1)[0])  # the default file, then ours
    assert {"runhcs-wcow-process", "runhcs-wcow-hypervisor", "hv"} <= set(runtimes(written))
    assert not (node.root / "config.toml.wcow-backup").exists()
    assert nothing.result == "unchanged"


def test_containerd_refusing_the_new_file_rolls_back_to_the_old_one(node: FakeNode) -> None:
    original = node.config.read_bytes()
    node.faults.refuse = lambda text: (
        "CRI plugin failed: invalid runtime" if text and "bad" in text else None
    )

    report = node.agent().reconcile(make_plan(hyperv("bad"), process()))

    assert report.result == "rolled_back"
    assert report.restarts == ["apply", "rollback"]
    assert node.config.read_bytes() == original, "the old file is back, byte for byte"
    assert node.running_text == original.decode(), "containerd runs the old file again"
    assert node.cri_up
    for handler in ("bad", "proc"):
        outcome = (report.handlers or {})[handler]
        assert (outcome.state, outcome.reason) == ("Failed", "ContainerdRolledBack")
        assert "CRI plugin failed: invalid runtime" in outcome.message
    assert any(reason == "ContainerdRollback" for reason, _, _ in report.events)
    assert runp_handlers(node) == []
    state, _ = load_state(node.root / "config.toml.wcow-state.json")
    assert state.owned == {}
    assert not state.restart_pending

    # The same plan again: the rejected file is not tried again (no restart loop).
    again = node.agent().reconcile(make_plan(hyperv("bad"), process()))
    assert again.restarts == []
    assert (again.handlers or {})["bad"].reason == "ConfigRejectedBefore"
    # A changed plan is a new file: tried again.
    fixed = node.agent().reconcile(make_plan(process()))
    assert fixed.restarts == ["apply"]
    assert (fixed.handlers or {})["proc"].state == "Ready"


def test_containerd_that_starts_but_never_answers_on_cri_is_rolled_back(node: FakeNode) -> None:
    original = node.config.read_text()
    node.faults.refuse_mode = "cri"
    node.faults.refuse = lambda text: "hangs" if text and "hv" in text else None

    report = node.agent(restart_timeout=30).reconcile(make_plan(hyperv()))

    assert report.result == "rolled_back"
    outcome = (report.handlers or {})["hv"]
    assert "did not answer on CRI within 30 s" in outcome.message
    assert node.disk_text() == original
    assert node.running_text == original


def test_a_file_containerd_cannot_load_is_never_written(node: FakeNode) -> None:
    original = node.config.read_bytes()

    def refuse_dump(config: Any) -> str:
        raise __import__("wcow_agent.host.interfaces").host.interfaces.ContainerdError(
            "failed to load TOML: invalid plugin key"
        )

    agent = node.agent()
    agent.host.containerd.config_dump = refuse_dump  # type: ignore[method-assign]
    report = agent.reconcile(make_plan(hyperv()))

    assert report.result == "rejected"
    assert (report.handlers or {})["hv"].reason == "ConfigRejected"
    assert "invalid plugin key" in (report.handlers or {})["hv"].message
    assert node.config.read_bytes() == original
    assert node.restarts == []


def test_tables_removed_by_someone_else_are_written_again(node: FakeNode) -> None:
    plan = make_plan(hyperv(), process())
    agent = node.agent()
    agent.reconcile(plan)
    merged = node.disk_text()
    node.config.write_text(DEFAULT_17)  # a provisioning script put its own file back

    report = agent.reconcile(plan)

    assert report.drift_repaired == ["hv", "proc"]
    assert report.restarts == ["apply"]
    assert node.disk_text() == merged
    assert any(reason == "DriftRepaired" for reason, _, _ in report.events)
    # Repaired tables are proven again (containerd may have loaded the other file).
    assert sorted(runp_handlers(node)) == ["hv", "hv", "proc", "proc"]


def test_an_edit_elsewhere_that_keeps_our_tables_restarts_nothing(node: FakeNode) -> None:
    plan = make_plan(hyperv())
    agent = node.agent()
    agent.reconcile(plan)
    edited = (node.disk_text() or "").replace("max_conf_num = 1", "max_conf_num = 2")
    node.config.write_text(edited)

    report = agent.reconcile(plan)

    assert report.restarts == []
    assert node.disk_text() == edited
    assert report.drift_repaired == []
    assert any(reason == "ConfigChangedElsewhere" for reason, _, _ in report.events)


def test_a_tampered_owned_table_is_repaired(node: FakeNode) -> None:
    plan = make_plan(hyperv())
    agent = node.agent()
    agent.reconcile(plan)
    node.config.write_text(
        (node.disk_text() or "").replace("VmMemorySizeInMb = 2048", "VmMemorySizeInMb = 512")
    )

    report = agent.reconcile(plan)

    assert report.drift_repaired == ["hv"]
    assert runtimes(node.running_text)["hv"]["options"]["VmMemorySizeInMb"] == 2048


def test_canary_requests_are_what_crictl_and_hcs_expect(node: FakeNode) -> None:
    node.agent().reconcile(make_plan(hyperv()))

    ((_kind, pod),) = [item for item in node.crictl_inputs if item[0] == "runp"]
    assert pod["metadata"]["namespace"] == "wcow-canary"
    assert pod["metadata"]["name"] == "wcow-canary-hv"
    assert len(pod["metadata"]["uid"]) == 32
    assert pod["labels"]["runtime.wcow.dev/canary"] == "true"
    assert pod["labels"]["runtime.wcow.dev/canary-handler"] == "hv"
    assert pod["log_directory"].startswith("C:\\ProgramData\\wcow-agent\\canary\\")
    runp = next(c for c in node.crictl_calls if "runp" in c)
    assert runp[-3:-1] == ["--runtime", "hv"]
    sandbox_id = next(c for c in node.crictl_calls if "stopp" in c)[-1]
    calls = node.computecore.calls
    enumerate_call = next(c for c in calls if c[0] == "HcsEnumerateComputeSystems")
    assert enumerate_call[1] == {"Ids": [sandbox_id, f"{sandbox_id}@vm"]}
    open_call = next(c for c in calls if c[0] == "HcsOpenComputeSystem")
    assert open_call[1:] == (f"{sandbox_id}@vm", GENERIC_ALL)
    properties = next(c for c in calls if c[0] == "HcsGetComputeSystemProperties")
    assert properties[2] == {"PropertyTypes": ["Memory"]}
    # The VM is inspected before the sandbox is stopped, and never held afterwards.
    names = [c[0] for c in calls]
    assert names.index("HcsCloseComputeSystem") == names.index("HcsGetComputeSystemProperties") + 3
    node.computecore.assert_clean()


def test_a_sandbox_without_the_promised_isolation_fails_and_is_cleaned_up(node: FakeNode) -> None:
    node.faults.ignore_isolation = True  # the shim ran the sandbox as a process container

    report = node.agent().reconcile(make_plan(hyperv()))

    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "IsolationMismatch")
    assert "not Hyper-V isolated" in outcome.message
    assert node.canary_sandboxes() == []
    assert node.systems == {}
    node.computecore.assert_clean()


def test_vm_size_is_checked_where_it_can_be_observed(node: FakeNode) -> None:
    node.faults.vm_memory_mb = 1024  # the handler's size was not applied: hcsshim's default
    report = node.agent().reconcile(make_plan(hyperv(vm={"memoryMB": 512})))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "VmSizeMismatch")
    assert "1024 MB assigned, more than the 512 MB" in outcome.message

    # A VA-backed VM reports what it touched: less than asked is no evidence.
    report = node.agent().reconcile(make_plan(hyperv("va", vm={"memoryMB": 4096})))
    assert (report.handlers or {})["va"].state == "Ready"
    # A physically backed VM must have all of it.
    backed = {"memoryMB": 4096, "fullyPhysicallyBacked": True}
    report = node.agent().reconcile(make_plan(hyperv("backed", vm=backed)))
    outcome = (report.handlers or {})["backed"]
    assert (outcome.state, outcome.reason) == ("Failed", "VmSizeMismatch")
    assert "physically backed" in outcome.message

    bigger = fresh_node(node.root / "n2")
    bigger.faults.vm_processors = 1
    image = {
        "enabled": True,
        "timeoutSeconds": 120,
        "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022",
    }
    report = bigger.agent().reconcile(make_plan(hyperv(canary=image)))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "VmSizeMismatch")
    assert "1 processors" in outcome.message
    created = [doc for kind, doc in bigger.crictl_inputs if kind == "create"]
    assert created[0]["image"] == {"image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}
    assert bigger.canary_sandboxes() == []


def test_processor_count_is_capped_at_the_hosts_processors(tmp_path: Any) -> None:
    node = FakeNode(tmp_path, config_text=DEFAULT_17, logical_processors=2)
    image = {"enabled": True, "timeoutSeconds": 120, "image": "nanoserver"}
    report = node.agent().reconcile(
        make_plan(hyperv(vm={"processorCount": 4, "memoryMB": 2048}, canary=image))
    )
    assert (report.handlers or {})["hv"].state == "Ready"
    assert report.canaries[0].observed == {"memoryMB": 2048, "processors": 2}


def test_a_hanging_canary_times_out_and_its_late_sandbox_is_removed(node: FakeNode) -> None:
    node.faults.runp_hangs = True

    report = node.agent().reconcile(make_plan(hyperv()))

    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "CanaryTimeout")
    assert node.canary_sandboxes() == [], "the sandbox that came up late was found by its run label"


def test_canary_left_behind_by_a_killed_agent_is_swept(node: FakeNode) -> None:
    node.sandboxes["old"] = Sandbox(
        "old", "wcow-canary-hv", "wcow-canary", "u", "hv", {"runtime.wcow.dev/canary": "true"}
    )
    node.sandboxes["user"] = Sandbox("user", "web", "default", "u2", "hv", {"app": "web"})

    report = node.agent().reconcile(make_plan())

    assert "old" not in node.sandboxes
    assert "user" in node.sandboxes, "only canary sandboxes are touched"
    assert any(reason == "CanaryLeftoversRemoved" for reason, _, _ in report.events)


def test_disabled_canary_labels_ready_without_a_sandbox(node: FakeNode) -> None:
    report = node.agent().reconcile(make_plan(hyperv(canary={"enabled": False})))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Ready", "CanaryDisabled")
    assert runp_handlers(node) == []


def test_forced_canary_reruns_every_applied_handler(node: FakeNode) -> None:
    plan = make_plan(hyperv(), process())
    agent = node.agent()
    agent.reconcile(plan)
    agent.reconcile(plan, force_canary=True)
    assert sorted(runp_handlers(node)) == ["hv", "hv", "proc", "proc"]


def test_network_not_ready_leaves_handlers_pending_and_asks_for_a_retry(node: FakeNode) -> None:
    node.network_ready = False
    report = node.agent().reconcile(make_plan(hyperv()))
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Pending", "NetworkNotReady")
    assert report.requeue
    assert runp_handlers(node) == []


def test_containerd_running_an_older_file_is_restarted_once(node: FakeNode) -> None:
    """An offline `merge --write` (or a lost state file) left tables containerd never
    loaded: the canary says "no runtime", the agent restarts containerd once."""
    plan = make_plan(hyperv())
    agent = node.agent()
    agent.reconcile(plan)
    (node.root / "config.toml.wcow-state.json").unlink()
    node.running_text = DEFAULT_17  # containerd was restarted with the old file meanwhile

    first = node.agent().reconcile(plan)
    assert (first.handlers or {})["hv"].reason == "RuntimeNotLoaded"
    assert first.requeue

    second = node.agent().reconcile(plan)
    assert second.restarts == ["recovery"]
    assert (second.handlers or {})["hv"].state == "Ready"


def test_containerd_2_config_v3_gets_its_tables_at_the_v3_path(tmp_path: Any) -> None:
    original = (CONFIGS / "v3-containerd-2.1-default.toml").read_text()
    node = FakeNode(tmp_path, containerd_version="2.1.4", config_text=original)

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.config_version == 3
    document = tomllib.loads(node.disk_text() or "")
    table = document["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["hv"]
    assert table["options"]["SandboxIsolation"] == 1
    assert (report.handlers or {})["hv"].state == "Ready"
    assert MARKER in (node.disk_text() or "")


def test_state_records_what_containerd_loaded(node: FakeNode) -> None:
    node.agent().reconcile(make_plan(hyperv()))
    state, warning = load_state(node.root / "config.toml.wcow-state.json")
    assert warning is None
    assert state.loaded == text_hash(node.disk_text() or "")
    assert state.written == state.loaded
    assert not state.restart_pending
    assert set(state.canaried) == {"hv"}


def test_a_file_the_agent_cannot_replace_fails_the_cycle_not_the_agent(
    node: FakeNode, monkeypatch: Any
) -> None:
    import os
    import types

    from wcow_agent.config import files

    def locked(source: Any, target: Any) -> None:
        if Path(target).name == "config.toml":
            raise PermissionError(13, "The process cannot access the file", str(target))
        os.replace(source, target)

    proxy = types.SimpleNamespace(**{n: getattr(os, n) for n in dir(os) if not n.startswith("__")})
    proxy.replace = locked
    monkeypatch.setattr(files, "os", proxy)
    original = node.config.read_bytes()

    report = node.agent().reconcile(make_plan(hyperv()))

    assert report.result == "failed"
    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Failed", "FileError")
    assert "cannot access the file" in outcome.message
    assert node.config.read_bytes() == original
    assert node.restarts == []

    monkeypatch.undo()
    again = node.agent().reconcile(make_plan(hyperv()))
    assert (again.handlers or {})["hv"].state == "Ready"
    assert again.restarts == ["apply"]


def test_without_cri_nothing_is_written_or_restarted(node: FakeNode) -> None:
    """crictl missing or a wrong endpoint: the agent cannot judge a restart, so it makes
    none (otherwise it would restart and roll back a healthy containerd every cycle)."""
    original = node.config.read_bytes()
    node.cri_up = False

    for _ in range(3):
        report = node.agent().reconcile(make_plan(hyperv()))
        assert report.restarts == []
        outcome = (report.handlers or {})["hv"]
        assert (outcome.state, outcome.reason) == ("Failed", "CriUnreachable")
        assert "crictl" in outcome.message

    assert node.config.read_bytes() == original
    assert node.restarts == []
    node.cri_up = True
    assert node.agent().reconcile(make_plan(hyperv())).restarts == ["apply"]


def test_canary_passes_for_a_shim_named_by_runtime_path(node: FakeNode) -> None:
    shim = r"C:\Program Files\hcsshim\v0.15\containerd-shim-runhcs-v1.exe"
    plan = make_plan(hyperv(containerd={"runtimePath": shim}))

    report = node.agent().reconcile(plan)

    outcome = (report.handlers or {})["hv"]
    assert (outcome.state, outcome.reason) == ("Ready", "CanaryPassed"), outcome.message
