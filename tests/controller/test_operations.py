"""Settings and the watch filters of the running operator."""

from __future__ import annotations

import pytest

from wcow_operator.settings import SettingsError, parse_settings


def test_flags_win_over_environment() -> None:
    env = {
        "WCOW_NAMESPACE": "from-env",
        "WCOW_METRICS_PORT": "9999",
        "WCOW_LEADER_ELECTION": "false",
    }
    settings = parse_settings(["--namespace", "ops", "--leader-election"], env)
    assert settings.namespace == "ops"
    assert settings.metrics_port == 9999
    assert settings.leader_election is True


def test_environment_and_defaults() -> None:
    settings = parse_settings(
        [], {"POD_NAMESPACE": "wcow-system", "WCOW_REQUIRE_NODE_GATING": "yes"}
    )
    assert settings.namespace == "wcow-system"
    assert settings.require_node_gating is True
    assert settings.leader_election is True
    assert settings.resync_seconds == 300
    assert settings.health_port == 8080


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "no namespace"),
        (["--namespace", "x", "--resync-seconds", "1"], {}, "at least 5"),
        (["--namespace", "x"], {"WCOW_LEADER_ELECTION": "maybe"}, "WCOW_LEADER_ELECTION"),
        (["--namespace", "x"], {"WCOW_METRICS_PORT": "http"}, "invalid number"),
    ],
)
def test_bad_settings_say_what_is_wrong(
    argv: list[str], env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wcow_operator import settings as module

    monkeypatch.setattr(module, "SERVICE_ACCOUNT_NAMESPACE", module.Path("/nonexistent"))
    with pytest.raises(SettingsError, match=message):
        parse_settings(argv, env)


def test_eviction_is_off_unless_allowed_or_the_default_drain_is_evict() -> None:
    """Without eviction allowed the operator's token reads no pod (the chart grants the
    pod list only with it): so it is off by default, and on with --drain Evict."""
    ns = ["--namespace", "x"]
    assert parse_settings(ns, {}).allow_evict is False
    assert parse_settings([*ns, "--allow-evict"], {}).allow_evict is True
    assert parse_settings(ns, {"WCOW_ALLOW_EVICT": "true"}).allow_evict is True
    assert parse_settings([*ns, "--drain", "Evict"], {}).allow_evict is True
    with pytest.raises(SettingsError, match="--drain Evict needs eviction allowed"):
        parse_settings([*ns, "--drain", "Evict", "--no-allow-evict"], {})
