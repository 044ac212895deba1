"""The merge edits text at table boundaries and checks itself; layouts it cannot vouch for
are verified in full or handed to tomlkit. Either way the result means what was meant."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from wcow_agent.config import merge_splice
from wcow_agent.config.merge import merge_config
from wcow_agent.config.merge_decision import MARKER, ConfigError
from wcow_agent.config.toml_text import parse_key, scan_headers

HV = {"runtime_type": "io.containerd.runhcs.v1", "options": {"SandboxIsolation": 1}}
V2 = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")
HEAD = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "p"\n'


@pytest.fixture
def tomlkit_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = merge_splice._edit_tomlkit

    def spy(text: str, decision: Any, version_line: str) -> str:
        calls.append(text)
        return real(text, decision, version_line)

    monkeypatch.setattr(merge_splice, "_edit_tomlkit", spy)
    return calls


def runtimes(text: str) -> dict[str, Any]:
    node: Any = tomllib.loads(text)
    for name in V2:
        node = node.get(name, {})
    return dict(node)


def test_the_common_layout_is_edited_in_place(tomlkit_calls: list[str]) -> None:
    original = (
        HEAD
        + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.p]\n'
        + 'runtime_type = "io.containerd.runhcs.v1"\n'
    )
    result = merge_config(original, {"hv": HV}, {})
    assert tomlkit_calls == []
    assert result.text.startswith(original)
    assert result.text[len(original) :] == (
        "\n"
        f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hv] # {MARKER}\n'
        'runtime_type = "io.containerd.runhcs.v1"\n'
        "\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hv.options]\n'
        "SandboxIsolation = 1\n"
    )
    assert merge_config(result.text, {}, result.owned).text == original


def test_our_tables_follow_the_files_spelling_and_line_endings() -> None:
    original = (
        "version = 3\r\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.p]\r\n"
        "  runtime_type = 'io.containerd.runhcs.v1'\r\n"
    )
    result = merge_config(original, {"hv": HV}, {})
    assert (
        f"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.hv] # {MARKER}\r\n"
        in result.text
    )
    assert "\n" not in result.text.replace("\r\n", "")


def test_inline_tables_make_the_merge_check_the_whole_result(tomlkit_calls: list[str]) -> None:
    original = HEAD + (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        'p = { runtime_type = "io.containerd.runhcs.v1" }  # the default, inline\n'
    )
    result = merge_config(original, {"hv": HV}, {})
    assert tomlkit_calls == []
    assert result.text.startswith(original)
    assert runtimes(result.text) == {"p": {"runtime_type": "io.containerd.runhcs.v1"}, "hv": HV}


def test_a_header_inside_a_multiline_string_is_not_a_table(tomlkit_calls: list[str]) -> None:
    original = HEAD + (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.p]\n'
        'runtime_type = "io.containerd.runhcs.v1"\n'
        'base_runtime_spec = """\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hv] # ' + MARKER + "\n"
        '"""\n'
    )
    result = merge_config(original, {"hv": HV}, {})
    assert runtimes(result.text)["p"]["base_runtime_spec"].startswith("[plugins.")
    assert runtimes(result.text)["hv"] == HV
    removed = merge_config(result.text, {}, result.owned)
    assert removed.text == original


def test_runtimes_written_as_dotted_keys_are_refused_not_mangled(
    tomlkit_calls: list[str],
) -> None:
    # Someone rewrote the agent's table as dotted keys: no header to cut at, and tomlkit
    # would write the replacement at the wrong path. The merge refuses, saying why.
    original = (
        HEAD
        + 'runtimes.p.runtime_type = "io.containerd.runhcs.v1"\n'
        + 'runtimes.hv.runtime_type = "io.containerd.runhcs.v1"\n'
        + "runtimes.hv.options.SandboxIsolation = 0\n"
    )
    with pytest.raises(ConfigError, match=r"write those runtimes as \[table\] sections"):
        merge_config(original, {"hv": HV}, {"hv": "sha256:old"})
    assert len(tomlkit_calls) == 1


def test_a_multiline_string_elsewhere_is_checked_in_full_and_kept(
    tomlkit_calls: list[str],
) -> None:
    original = HEAD + (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.p]\n'
        'runtime_type = "io.containerd.runhcs.v1"\n'
        "[plugins.x]\n"
        'y = """\n[not.a.header]\n"""\n'
    )
    result = merge_config(original, {"hv": HV}, {})
    assert tomlkit_calls == []
    assert result.text.startswith(original.split("[plugins.x]")[0])
    assert runtimes(result.text)["hv"] == HV
    assert tomllib.loads(result.text)["plugins"]["x"]["y"] == "[not.a.header]\n"


def test_a_quoted_key_with_a_bracket_is_read_as_one_header() -> None:
    original = HEAD + (
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.p]\n'
        'runtime_type = "io.containerd.runhcs.v1"\n'
        '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."odd]name"]\n'
        'endpoint = ["https://mirror"]\n'
    )
    scan = scan_headers(original.splitlines(keepends=True))
    assert not scan.unsure
    assert scan.headers[-1].path[-1] == "odd]name"
    result = merge_config(original, {"hv": HV}, {})
    document = tomllib.loads(result.text)
    assert document["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["mirrors"]["odd]name"] == {
        "endpoint": ["https://mirror"]
    }
    assert runtimes(result.text)["hv"] == HV


def test_removing_our_table_keeps_the_users_comment_that_follows_it() -> None:
    ours = merge_config(HEAD, {"hv": HV}, {})
    edited = (
        ours.text
        + "# registry settings (platform team)\n"
        + '[plugins."io.containerd.grpc.v1.cri".registry]\n'
        + "config_path = 'C:\\certs'\n"
    )
    removed = merge_config(edited, {}, ours.owned)
    assert "# registry settings (platform team)\n" in removed.text
    assert "runtimes.hv" not in removed.text


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        (
            'plugins."io.containerd.grpc.v1.cri".containerd',
            ("plugins", "io.containerd.grpc.v1.cri", "containerd"),
        ),
        (
            "plugins . 'io.containerd.cri.v1.runtime' . x",
            ("plugins", "io.containerd.cri.v1.runtime", "x"),
        ),
        ('a."b\\"c"', ("a", 'b"c')),
        ("a..b", None),
    ],
)
def test_header_keys_are_read_like_toml(key: str, parts: tuple[str, ...] | None) -> None:
    assert parse_key(key) == parts
