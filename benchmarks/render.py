"""How long rendering N profiles takes, and its peak memory.

    .venv/bin/python benchmarks/render.py [--profiles 500] [--repeat 5]

Prints the full render (validate, RuntimeClasses, plan, both TOML fragments re-parsed,
YAML and JSON text) and, as the baseline from the same process, validation alone; the ratio
says what rendering adds on top of parsing. Target: the full render of 500 under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from typing import Any

from wcow_contract.errors import parse_profile
from wcow_contract.wire.plan import dump_plan
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.profile_set import render_all
from wcow_operator.render.serialize import dump_yaml_documents

BUILDS = ("ltsc2019", "ltsc2022", "ltsc2025", "10.0.20348")


def documents(count: int) -> list[dict[str, Any]]:
    """A mix like a large fleet's: process classes and Hyper-V sizes per build."""
    docs = []
    for index in range(count):
        spec: dict[str, Any]
        if index % 5 == 0:
            spec = {"isolation": "Process", "windowsBuild": BUILDS[index % 3]}
        else:
            spec = {
                "isolation": "HyperV",
                "windowsBuild": BUILDS[index % len(BUILDS)],
                "vm": {
                    "processorCount": 1 + index % 8,
                    "memoryMB": 1024 * (1 + index % 8),
                    "fullyPhysicallyBacked": index % 7 == 0,
                },
                "scheduling": {
                    "tolerations": [
                        {
                            "key": "os",
                            "operator": "Equal",
                            "value": "windows",
                            "effect": "NoSchedule",
                        }
                    ]
                },
                "containerd": {"options": {"ScrubLogs": True}},
            }
        docs.append(
            {
                "apiVersion": "runtime.wcow.dev/v1alpha1",
                "kind": "WindowsRuntimeProfile",
                "metadata": {
                    "name": f"profile-{index:05d}",
                    "generation": 1,
                    "uid": f"uid-{index}",
                },
                "spec": spec,
            }
        )
    return docs


def validate_only(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        parse_profile(doc)


def full_render(docs: list[dict[str, Any]]) -> int:
    rendered = render_all([parse_profile(doc) for doc in docs])
    text = dump_yaml_documents(
        [*rendered.runtime_classes, plan_config_map(rendered.plan, "wcow-system")]
    )
    return (
        len(text) + len(dump_plan(rendered.plan)) + sum(map(len, rendered.containerd_toml.values()))
    )


def timed(function: Any, docs: list[dict[str, Any]], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function(docs)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    docs = documents(args.profiles)
    full_render(docs)  # warm caches (pydantic, tomlkit) before timing

    baseline = timed(validate_only, docs, args.repeat)
    render = timed(full_render, docs, args.repeat)
    tracemalloc.start()
    size = full_render(docs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"profiles:               {args.profiles}")
    print(f"validate only (median): {baseline * 1000:8.1f} ms   (baseline)")
    print(f"full render (median):   {render * 1000:8.1f} ms   target < 1000 ms")
    print(f"ratio render/validate:  {render / baseline:8.1f} x")
    print(f"per profile:            {render / args.profiles * 1e6:8.0f} us")
    print(f"output size:            {size / 1024:8.0f} KiB")
    print(f"peak traced memory:     {peak / 2**20:8.1f} MiB")


if __name__ == "__main__":
    main()
