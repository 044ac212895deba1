"""The image checks' settings: the operator's flags, the chart's values that set them, and
the one Secret the operator may read."""

from __future__ import annotations

import pytest
from deploy.generate import NAMESPACE, RELEASE

from tests.delivery.helpers import find, lint, render
from wcow_operator import rbac
from wcow_operator.settings import SettingsError, parse_settings

ENV = {"POD_NAMESPACE": NAMESPACE}
VALUES = {
    "webhook": {
        "images": {
            "enabled": True,
            "insecureRegistries": ["registry.lab:5000"],
            "registrySecret": "pull-creds",
            "unreachableRegistry": "Refuse",
            "lookupTimeoutSeconds": 0.8,
        }
    }
}


def _args(values: dict[str, object]) -> list[str]:
    deployment = find(render(values), "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_off_by_default_no_lookups_and_no_secret_access() -> None:
    settings = parse_settings(_args({}), ENV)
    assert settings.images.resolve is False
    objects = render({})
    assert not any("secrets" in str(o.get("rules")) for o in objects)


def test_the_chart_values_reach_the_operator_and_grant_get_on_that_secret_only() -> None:
    settings = parse_settings(_args(VALUES), ENV).images
    assert settings.resolve is True
    assert settings.insecure_registries == ("registry.lab:5000",)
    assert settings.registry_secret == "pull-creds"
    assert settings.unreachable_registry == "Refuse"
    assert settings.lookup_timeout_seconds == 0.8
    objects = render(VALUES)
    role = find(objects, "Role", f"{RELEASE}-operator-registry-secret")
    assert role["rules"] == rbac.registry_secret_rules("pull-creds")
    assert rbac.allows(role["rules"], "", "secrets", "get", "pull-creds")
    assert not rbac.allows(role["rules"], "", "secrets", "get", "other")
    assert not rbac.allows(role["rules"], "", "secrets", "list")
    binding = find(objects, "RoleBinding", f"{RELEASE}-operator-registry-secret")
    assert binding["subjects"][0]["name"] == f"{RELEASE}-operator"
    assert not lint(VALUES)


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["--insecure-registry", "http://x"], "HOST or HOST:PORT"),
        (["--image-lookup-timeout-seconds", "3"], "0.1 to 1.5"),
        (["--registry-secret", "Bad_Name"], "not a valid Secret name"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(argv: list[str], wanted: str) -> None:
    with pytest.raises(SettingsError, match=wanted):
        parse_settings(["--resolve-images", *argv], ENV)
