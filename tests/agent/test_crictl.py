"""CRI through crictl: the command lines and request files the agent produces, and
crictl's JSON read back; the command runner's timeouts and cancellation."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.agent.fakes import wire
from wcow_agent.host.crictl import CrictlCri
from wcow_agent.host.interfaces import CancelledError, CommandTimeoutError, CriError, HostError
from wcow_agent.host.process import Completed, SubprocessRunner


class Recorder:
    def __init__(self, stdout: str = "", returncode: int = 0, stderr: str = "") -> None:
        self.result = Completed(returncode, stdout, stderr)
        self.calls: list[tuple[list[str], float]] = []
        self.files: dict[str, object] = {}

    def __call__(
        self, args: Sequence[str], *, timeout: float, input_text: str | None = None
    ) -> Completed:
        self.calls.append((list(args), timeout))
        for arg in args:
            if arg.endswith(".json") and Path(arg).exists():
                self.files[Path(arg).name] = json.loads(Path(arg).read_text())
        return self.result


def test_every_call_names_the_endpoint_and_a_timeout(tmp_path: Path) -> None:
    runner = Recorder(json.dumps(wire("crictl-info.json")))
    cri = CrictlCri(runner, r"C:\k\crictl.exe", work_dir=tmp_path)
    status = cri.status(7.2)
    ((args, timeout),) = runner.calls
    assert args == [
        r"C:\k\crictl.exe",
        "--runtime-endpoint",
        "npipe:////./pipe/containerd-containerd",
        "--image-endpoint",
        "npipe:////./pipe/containerd-containerd",
        "--timeout",
        "8s",
        "info",
        "-o",
        "json",
    ]
    assert timeout > 8, "the process gets longer than crictl's own RPC timeout"
    assert status.runtime_ready
    assert status.network_ready
    assert status.handlers is None  # containerd 1.7 does not report handlers


def test_runp_hands_crictl_a_snake_case_pod_config_and_reads_the_id(tmp_path: Path) -> None:
    runner = Recorder("time=... level=warning msg=x\n" + "a" * 64 + "\n")
    cri = CrictlCri(runner, work_dir=tmp_path)
    config = {
        "metadata": {"name": "n", "namespace": "ns", "uid": "u", "attempt": 0},
        "log_directory": "C:\\logs",
    }

    sandbox = cri.run_pod_sandbox(config, "hv", 60)

    assert sandbox == "a" * 64
    args, _ = runner.calls[0]
    assert args[7:10] == ["runp", "--runtime", "hv"]
    assert runner.files == {"0.json": config}
    assert list(tmp_path.iterdir()) == [], "request files are removed"


def test_inspectp_and_pods_are_read_from_crictls_json(tmp_path: Path) -> None:
    filled = {
        "SANDBOX_ID": "s1",
        "NAME": "n",
        "NAMESPACE": "ns",
        "UID": "u",
        "HANDLER": "hv",
        "STATE": "SANDBOX_READY",
    }
    inspect = CrictlCri(
        Recorder(json.dumps(wire("crictl-inspectp.json", **filled))), work_dir=tmp_path
    )
    status = inspect.pod_sandbox_status("s1", 10)
    assert (status.id, status.state, status.runtime_handler) == ("s1", "SANDBOX_READY", "hv")

    runner = Recorder(json.dumps(wire("crictl-pods.json", **filled)))
    pods = CrictlCri(runner, work_dir=tmp_path).list_pod_sandboxes({"b": "2", "a": "1"}, 10)
    assert [p.id for p in pods] == ["s1"]
    assert runner.calls[0][0][7:] == ["pods", "-o", "json", "--label", "a=1", "--label", "b=2"]


def test_containerd_2_reports_its_handlers(tmp_path: Path) -> None:
    status = CrictlCri(Recorder(json.dumps(wire("crictl-info-2x.json"))), work_dir=tmp_path).status(
        5
    )
    assert status.handlers == ("runhcs-wcow-process",)


def test_crictl_errors_carry_its_message(tmp_path: Path) -> None:
    fatal = 'time="x" level=fatal msg="run pod sandbox: no runtime for \\"hv\\" is configured"\n'
    cri = CrictlCri(Recorder("", 1, fatal), work_dir=tmp_path)
    with pytest.raises(CriError, match=r"crictl runp failed: .*no runtime for"):
        cri.run_pod_sandbox({"metadata": {}}, "hv", 10)


def test_cleanup_calls_use_the_runner_that_is_never_cancelled(tmp_path: Path) -> None:
    cancellable, steady = Recorder(), Recorder(json.dumps({"items": []}))
    cri = CrictlCri(cancellable, work_dir=tmp_path, steady_runner=steady)
    cri.stop_pod_sandbox("s", 5)
    cri.remove_pod_sandbox("s", 5)
    cri.list_pod_sandboxes({}, 5)
    assert [c[0][7] for c in steady.calls] == ["stopp", "rmp", "pods"]
    assert steady.calls[1][0][8:] == ["--force", "s"]
    assert cancellable.calls == []


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_runner_returns_output_and_feeds_input() -> None:
    result = SubprocessRunner()(
        python("import sys; print(sys.stdin.read().upper())"), timeout=30, input_text="hi"
    )
    assert (result.returncode, result.stdout.strip()) == (0, "HI")


def test_runner_kills_a_command_that_outlives_its_timeout() -> None:
    with pytest.raises(CommandTimeoutError, match="did not finish"):
        SubprocessRunner()(python("import time; time.sleep(60)"), timeout=0.5)


def test_runner_abandons_a_command_when_the_agent_stops() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError, match="agent is stopping"):
        SubprocessRunner(cancel)(python("import time; time.sleep(60)"), timeout=60)


def test_runner_reports_a_missing_tool() -> None:
    with pytest.raises(HostError, match="cannot run"):
        SubprocessRunner()(["/nonexistent/crictl.exe", "info"], timeout=5)
