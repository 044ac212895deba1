"""The plan document the node agents consume: shape, hash, determinism."""

from __future__ import annotations

import json
import tomllib

from tests.conftest import SAMPLES, MakeProfile
from wcow_contract.wire.canonical import canonical_json, canonical_object
from wcow_contract.wire.plan import (
    PLAN_CONFIGMAP,
    PLAN_HASH_ANNOTATION,
    PLAN_KEY,
    build_plan,
    dump_plan,
    plan_entry,
    plan_for,
    plan_hash,
    plan_with_text,
)
from wcow_operator.cli import load_profiles
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.containerd import render_containerd_toml
from wcow_operator.render.profile_set import FRAGMENT_VERSIONS, render_all


def test_plan_entry_carries_what_the_agent_needs(make_profile: MakeProfile) -> None:
    profile = make_profile(
        "hv", vm={"processorCount": 1, "memoryMB": 2048}, canary={"timeoutSeconds": 60}
    )
    plan = plan_for([profile]).document()
    assert plan["apiVersion"] == "runtime.wcow.dev/v1alpha1"
    assert plan["kind"] == "RuntimePlan"
    assert plan["schemaVersion"] == 1
    assert plan["runtimesPath"]["2"] == [
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
        "runtimes",
    ]
    assert plan["runtimesPath"]["3"] == plan["runtimesPath"]["4"]
    entry = plan["handlers"]["hv"]
    assert entry["profile"] == "hv"
    assert entry["isolation"] == "HyperV"
    assert entry["windowsBuild"] == "10.0.20348"
    assert entry["vm"] == {"processorCount": 1, "memoryMB": 2048, "fullyPhysicallyBacked": False}
    assert entry["canary"] == {"enabled": True, "timeoutSeconds": 60, "image": None}
    assert entry["runtime"]["options"]["VmMemorySizeInMb"] == 2048


def test_plan_tables_render_to_the_same_toml_as_the_fragments() -> None:
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    rendered = render_all([item.profile for item in loaded])
    tables = {h: e.runtime for h, e in rendered.plan.handlers.items()}
    for version in FRAGMENT_VERSIONS:
        assert render_containerd_toml(tables, version) == rendered.containerd_toml[version]
        parsed = tomllib.loads(rendered.containerd_toml[version])
        path = rendered.plan.runtimes_path[str(version)]
        node = parsed
        for name in path:
            node = node[name]
        assert node == tables


def test_hash_changes_with_content_and_not_with_order(make_profile: MakeProfile) -> None:
    a, b = make_profile("a"), make_profile("b", isolation="Process")
    assert plan_for([a, b]).hash == plan_for([b, a]).hash
    assert dump_plan(plan_for([a, b])) == dump_plan(plan_for([b, a]))
    bigger = make_profile("a", vm={"memoryMB": 4096})
    assert plan_for([bigger, b]).hash != plan_for([a, b]).hash
    assert plan_for([a, b]).hash.startswith("sha256:")


def test_plan_config_map_holds_the_plan_and_its_hash(make_profile: MakeProfile) -> None:
    plan = plan_for([make_profile()])
    config_map = plan_config_map(plan, "wcow-system")
    assert config_map["metadata"]["name"] == PLAN_CONFIGMAP == "wcow-runtime-plan"
    assert config_map["metadata"]["namespace"] == "wcow-system"
    assert config_map["metadata"]["annotations"][PLAN_HASH_ANNOTATION] == plan.hash
    assert json.loads(config_map["data"][PLAN_KEY]) == plan.document()


def test_rendering_twice_is_byte_identical() -> None:
    loaded, _ = load_profiles([str(SAMPLES)])
    profiles = [item.profile for item in loaded]
    first, second = render_all(profiles), render_all(list(reversed(profiles)))
    assert first == second


def test_the_plan_text_is_the_canonical_json_of_its_view_and_its_hash_holds() -> None:
    """``plan_with_text`` encodes the handlers once for the hash and the text: the bytes must
    be exactly ``canonical_json`` of the view (hostile strings included), and the hash the
    agent checks must hold over them."""
    loaded, errors = load_profiles([str(SAMPLES)])
    assert not errors
    entries = {item.profile.handler: plan_entry(item.profile) for item in loaded}
    assert len(entries) > 5
    plan, view, text = plan_with_text(entries)
    assert text.encode("utf-8") == canonical_json(view)
    assert view == plan.view() == build_plan(entries).view()
    body = {k: v for k, v in json.loads(text).items() if k != "hash"}
    assert plan.hash == view["hash"] == plan_hash(body)


def test_canonical_object_matches_canonical_json() -> None:
    document = {"b": [1, {"z": "é", "a": None}], "a": '\u2028"', "kind": {"kind": 1}, "": 0}
    members = {key: canonical_json(value) for key, value in document.items()}
    assert canonical_object(members) == canonical_json(document)
