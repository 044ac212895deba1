"""The Argo CD health check (deploy/argocd/...) run the way Argo CD runs it: a Lua 5.1
interpreter (Argo CD embeds gopher-lua, a Lua 5.1; lupa's ``lua51`` is the reference C one)
with the object as the global ``obj``, the script's return value as the health.

Its testdata are the profiles of tests/controller/states.py, as ``kubectl get -o yaml``
prints them; regenerate them after a change of the conditions with
``.venv/bin/python -m tests.argocd``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from lupa import lua51

from tests.conftest import ROOT
from tests.controller import states

CHECK = (
    ROOT
    / "deploy"
    / "argocd"
    / "resource_customizations"
    / "runtime.wcow.dev"
    / "WindowsRuntimeProfile"
)


def halted_by_an_older_operator() -> states.Body:
    """A halted profile from an operator before Reconciling and Stalled (0.1)."""
    obj = states.halted()
    obj["status"]["conditions"] = [
        c for c in obj["status"]["conditions"] if c["type"] not in ("Reconciling", "Stalled")
    ]
    return obj


# testdata file -> the state it shows
TESTDATA: dict[str, Callable[[], states.Body]] = {
    "new.yaml": states.not_yet_seen,
    "generation_changed.yaml": states.generation_not_yet_seen,
    "rolling.yaml": states.rolling,
    "halted.yaml": states.halted,
    "invalid.yaml": states.invalid_last_good_kept,
    "nodes_failed.yaml": states.nodes_failed_at_rest,
    "no_eligible_nodes.yaml": states.new_without_nodes,
    "healthy.yaml": states.healthy,
    "halted_older_operator.yaml": halted_by_an_older_operator,
}


def as_kubectl_shows(obj: states.Body) -> str:
    """``kubectl get wrp NAME -o yaml``: the metadata the API server adds, keys sorted."""
    metadata = obj["metadata"]
    metadata["uid"] = "5f0c7a52-3f5e-4d7a-9a43-0d7f3b9e2c11"
    metadata["creationTimestamp"] = "2026-03-01T11:58:00Z"
    metadata["resourceVersion"] = "48213"
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)


def rendered_testdata() -> dict[str, str]:
    return {name: as_kubectl_shows(state()) for name, state in TESTDATA.items()}


def _lua_value(runtime: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return runtime.table_from({k: _lua_value(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_lua_value(runtime, v) for v in value])
    return value


def health(obj: Mapping[str, Any], script: Path = CHECK / "health.lua") -> dict[str, str]:
    """What Argo CD shows for ``obj``: {"status": ..., "message": ...}."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = _lua_value(runtime, obj)
    result = runtime.execute(script.read_text(encoding="utf-8"))
    return {key: str(result[key]) for key in ("status", "message") if result[key] is not None}


if __name__ == "__main__":
    for name, text in rendered_testdata().items():
        (CHECK / "testdata" / name).write_text(text, encoding="utf-8")
