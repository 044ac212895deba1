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


@pytest.mark.parametrize(
    "line",
    [
        "DB_PASSWORD=hunter2-secret-value",
        "client_secret=abcdef123456",
        "export API_TOKEN='quoted value with spaces'",
        '{"apiToken": "s3cr3t with spaces"}',
        "Authorization: Token 0123456789abcdef",
        "pushed with ghp_0123456789abcdefghijABCDEFGHIJ0123",
        "SAS https://acct.blob.core.windows.net/c?sv=2022&sig=AbCdEf0123456789%2Bxyz",
        "aws AKIAABCDEFGHIJKLMNOP key",
        "conn: connectionString=Server=db;Password=abc",
    ],
)
def test_common_secret_shapes_are_redacted(line: str) -> None:
    redacted = redact_text(line)
    assert REDACTED in redacted, redacted
    for secret in ("hunter2", "abcdef123456", "quoted value", "s3cr3t", "0123456789abcdef",
                   "ghp_0123", "AbCdEf0123", "AKIAABCDEFGHIJKLMNOP", "Password=abc"):  # fmt: skip
        assert secret not in redacted, redacted


def test_the_bundle_is_written_only_through_a_file_it_created(tmp_path: Path) -> None:
    """A name planted in the output folder (the old fixed ``.partial`` name as a symbolic
    link to a file of the victim's) is never written through."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me", encoding="utf-8")
    target = tmp_path / "bundle.tar.gz"
    (tmp_path / "bundle.tar.gz.partial").symlink_to(victim)
    write_bundle({"a.txt": "hello"}, target, "top", 0.0)
    assert victim.read_text(encoding="utf-8") == "keep me"
    with tarfile.open(target) as archive:
        assert archive.getnames() == ["top/a.txt"]
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == [
        "bundle.tar.gz.partial"
    ]  # only the planted link: the temporary file was renamed away
