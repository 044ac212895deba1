"""``kubectl wcow diagnose``: what the bundle holds, what it leaves out, and what it says
when something could not be read (an in-memory reader; the real API server in
tests/e2e/test_kubectl_wcow.py)."""

from __future__ import annotations

import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.plugin import fixtures
from wcow_operator.plugin import cli
from wcow_operator.plugin.collect import MAX_AGENT_LOGS, collect
from wcow_operator.plugin.diagnose_bundle import REDACTED, redact_object, redact_text, write_bundle

NOW = datetime(2026, 11, 25, 1, 30, tzinfo=UTC)


def bundle(tmp_path: Path, reader: fixtures.FakeReader, node: str | None = None) -> dict[str, str]:
    found = collect(reader, fixtures.NS, node, NOW)
    path = write_bundle(found.files, tmp_path / "b.tar.gz", "top", NOW.timestamp())
    with tarfile.open(path) as archive:
        members = archive.getmembers()
        assert all(m.name.startswith("top/") and m.mode == 0o600 for m in members)
        return {
            m.name.removeprefix("top/"): archive.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in members
        }


def test_bundle_holds_every_part_of_the_story(tmp_path: Path) -> None:
    files = bundle(tmp_path, fixtures.FakeReader())
    for name in (
        "README.txt", "status.txt", "status.json", "profiles.yaml", "runtimeclasses.yaml",
        "plan.yaml", "rollout.yaml", "events.yaml", "leader.yaml", "webhooks.yaml",
        "pods-operator.yaml", "pods-agent.yaml", "nodes/w1.yaml", "nodes/w5.yaml",
        "logs/operator/wcow-operator-1/operator.log",
        "logs/operator/wcow-operator-1/operator.previous.log",
        "logs/agent/w2/agent-w2/agent.log",
    ):  # fmt: skip
        assert name in files, name
    assert "HALTED" in files["status.txt"]
    w2 = yaml.safe_load(files["nodes/w2.yaml"])
    assert w2["agentStatus"]["handlers"]["hv"]["reason"] == "SandboxFailed"
    assert "managedFields" not in files["nodes/w2.yaml"]
    classes = yaml.safe_load(files["runtimeclasses.yaml"])
    assert [c["metadata"]["name"] for c in classes] == ["hv"]  # only the profiles' own
    assert {e["object"] for e in yaml.safe_load(files["events.yaml"])} == {
        "Node/x", "WindowsRuntimeProfile/x",
    }  # fmt: skip
    assert "everything was read." in files["README.txt"]


def test_logs_and_tokens_in_them_are_redacted(tmp_path: Path) -> None:
    files = bundle(tmp_path, fixtures.FakeReader())
    log = files["logs/agent/w2/agent-w2/agent.log"]
    assert "log of agent-w2/agent previous=False" in log
    assert fixtures.TOKEN not in "".join(files.values())
    assert f"Bearer {REDACTED}" in log


def test_previous_logs_only_after_a_restart(tmp_path: Path) -> None:
    reader = fixtures.FakeReader()
    bundle(tmp_path, reader)
    assert ("wcow-operator-1", "operator", True) in reader.logs  # restarted once
    assert not any(previous for pod, _, previous in reader.logs if pod.startswith("agent-"))


def test_troubled_nodes_logs_first_and_only_the_node_asked_for(tmp_path: Path) -> None:
    reader = fixtures.FakeReader()
    files = bundle(tmp_path, reader, node="w3")
    assert [n for n in files if n.startswith("nodes/")] == ["nodes/w3.yaml"]
    assert {pod for pod, _, _ in reader.logs} == {"wcow-operator-1", "agent-w3"}
    assert MAX_AGENT_LOGS >= 4
    reader = fixtures.FakeReader()
    files = bundle(tmp_path, reader)
    agents = [pod for pod, _, _ in reader.logs if pod.startswith("agent-")]
    assert agents[0] == "agent-w2"  # failed first
    assert "no agent pod on 1 Windows node(s): w5" in files["README.txt"]


def test_what_could_not_be_read_is_said_and_the_rest_collected(tmp_path: Path) -> None:
    reader = fixtures.FakeReader(forbidden=frozenset({"pod_log", "webhook_configurations"}))
    files = bundle(tmp_path, reader)
    readme = files["README.txt"]
    assert "could not read:" in readme
    assert "get webhook configurations: 403 Forbidden: cannot webhook_configurations" in readme
    assert "log of wcow-system/agent-w2 container agent: 403 Forbidden" in readme
    assert "nodes/w2.yaml" in files
    assert "HALTED" in files["status.txt"]


def test_redaction_of_credentials_wherever_they_are() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----"
    text = redact_text(
        f"token: {fixtures.TOKEN} url https://alice:s3cret@registry.example/v2 "
        f'"password": "hunter22" {pem} Authorization: Basic YWxpY2U6czNjcmV0'
    )
    for secret in (fixtures.TOKEN, "s3cret", "hunter22", "MIIE", "YWxpY2U6czNjcmV0"):
        assert secret not in text, secret
    assert "https://REDACTED@registry.example/v2" in text
    kept = "handler hv: SandboxFailed on w2; plan sha256:" + "a" * 64
    assert redact_text(kept) == kept
    obj = redact_object(
        {
            "metadata": {
                "managedFields": [{"manager": "x"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            },
            "spec": {"tolerations": [{"key": "os", "value": "windows"}]},
            "data": {"client-key-data": "abc", "token": "t", "caBundle": "LS0t"},
        }
    )
    assert obj == {
        "metadata": {"annotations": {}},
        "spec": {"tolerations": [{"key": "os", "value": "windows"}]},
        "data": {"client-key-data": REDACTED, "token": REDACTED, "caBundle": "LS0t"},
    }


def test_cli_refuses_a_missing_output_folder_and_a_missing_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "kubeconfig"
    assert cli.main(["status", "--kubeconfig", str(config)]) == cli.EXIT_CLUSTER
    assert "cannot load the kubeconfig" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["status", "-o", "yaml"])
    assert exit_.value.code == cli.EXIT_USAGE
