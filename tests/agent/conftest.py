from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import CONFIGS, FakeCluster, FakeNode
from tests.conftest import profile_document
from wcow_contract.errors import parse_profile
from wcow_contract.wire.canonical import dump_json
from wcow_contract.wire.plan import Plan, plan_document, plan_for

DEFAULT_17 = (CONFIGS / "v2-containerd-1.7-default.toml").read_text(encoding="utf-8")


def make_plan(*documents: dict[str, Any]) -> Plan:
    return plan_for([parse_profile(document) for document in documents])


def forge(handlers: Mapping[str, Any]) -> str:
    """plan.json holding these entry documents as they are, re-hashed: what anyone who can
    write the plan ConfigMap (or hand ``merge`` a file) can make."""
    return dump_json(plan_document(handlers))


def edited(plan: Plan, handler: str, **changes: Any) -> Plan:
    """``plan`` with fields of one entry replaced, unchecked and not re-hashed: a plan as if
    it had passed ``load_plan``, to see what the host makes of it."""
    entry = plan.handlers[handler].model_copy(update=changes)
    return plan.model_copy(update={"handlers": {**plan.handlers, handler: entry}})


def hyperv(name: str = "hv", **spec: Any) -> dict[str, Any]:
    return profile_document(name, **{"vm": {"processorCount": 2, "memoryMB": 2048}, **spec})


def process(name: str = "proc", **spec: Any) -> dict[str, Any]:
    body = {"isolation": "Process", **spec}
    document = profile_document(name, **body)
    document["spec"].pop("windowsBuild")
    if "windowsBuild" in spec:
        document["spec"]["windowsBuild"] = spec["windowsBuild"]
    return document


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    """A Windows Server 2022 node with Hyper-V and containerd 1.7's default config.toml."""
    return FakeNode(tmp_path, config_text=DEFAULT_17)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()
