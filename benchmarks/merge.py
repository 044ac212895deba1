"""How long the agent takes to merge a plan into a big config.toml, and to see that a rerun
has nothing to do.

    .venv/bin/python benchmarks/merge.py [--handlers 20] [--runtimes 200] [--repeat 7]

The file is containerd 1.7's Windows default plus ``--runtimes`` runtime tables of the
user's (each with options, annotation lists and a comment). Timed, as the agent does it on a
node, from reading the file to the file on disk:

- apply: read, merge ``--handlers`` handlers, write atomically (with backup);
- rerun: read, merge the same plan into the merged file: no change, nothing written;
- baselines, in the same process: a plain tomlkit parse and dump of the same file (what a
  round-tripping editor costs; the agent's fallback), and a plain tomllib parse (the one
  step the merge cannot skip: it decides on the parsed data).

Target: apply and rerun each under 50 ms. Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit

from wcow_agent.config import files
from wcow_agent.config.files import read_config
from wcow_agent.config.merge import merge_config
from wcow_contract.errors import parse_profile
from wcow_contract.wire.plan import Plan, plan_for

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests" / "fixtures" / "configs" / "v2-containerd-1.7-default.toml"
TARGET_MS = 50.0
PREFIX = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes'


def user_runtimes(count: int) -> str:
    blocks = []
    for index in range(count):
        name = f"team-{index:03d}"
        blocks.append(
            f"\n        # {name}: owned by team {index % 17}, ticket OPS-{1000 + index}\n"
            f"        {PREFIX}.{name}]\n"
            '          runtime_type = "io.containerd.runhcs.v1"\n'
            '          container_annotations = ["io.microsoft.container.*"]\n'
            f'          pod_annotations = ["io.microsoft.virtualmachine.{index}.*"]\n'
            f"          {PREFIX}.{name}.options]\n"
            f"            SandboxIsolation = {index % 2}\n"
            f"            VmMemorySizeInMb = {1024 * (1 + index % 4)}\n"
            f'            LogLevel = "info"   # raise when debugging\n'
        )
    return "".join(blocks)


def big_config(runtimes: int) -> str:
    text = DEFAULT.read_text(encoding="utf-8")
    anchor = '    [plugins."io.containerd.grpc.v1.cri".image_decryption]'
    at = text.index(anchor)
    return text[:at] + user_runtimes(runtimes).lstrip("\n") + "\n" + text[at:]


def plan(handlers: int) -> Plan:
    documents = []
    for index in range(handlers):
        spec: dict[str, Any] = {"isolation": "HyperV", "windowsBuild": "ltsc2022"}
        spec["vm"] = {"processorCount": 1 + index % 4, "memoryMB": 1024 * (1 + index % 8)}
        documents.append(
            {
                "apiVersion": "runtime.wcow.dev/v1alpha1",
                "kind": "WindowsRuntimeProfile",
                "metadata": {"name": f"hyperv-{index:02d}"},
                "spec": spec,
            }
        )
    return plan_for([parse_profile(d) for d in documents])


def median_ms(function: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handlers", type=int, default=20)
    parser.add_argument("--runtimes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    original = big_config(args.runtimes)
    desired = {h: e.runtime for h, e in plan(args.handlers).handlers.items()}
    writes = 0
    real_write = files.write_atomically

    def counting_write(path: Path, text: str, backup: bool = True) -> None:
        nonlocal writes
        writes += 1
        real_write(path, text, backup)

    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.toml"
        owned: dict[str, str] = {}

        def apply() -> None:
            nonlocal owned
            config.write_text(original, encoding="utf-8")
            text = read_config(config)
            result = merge_config(text, desired, {})
            if result.changed(text):
                counting_write(config, result.text)
            owned = result.owned

        def rerun() -> None:
            text = read_config(config)
            result = merge_config(text, desired, owned)
            if result.changed(text):
                counting_write(config, result.text)

        def baseline() -> None:
            tomlkit.dumps(tomlkit.parse(read_config(config)))

        def parse_only() -> None:
            tomllib.loads(read_config(config))

        apply_ms = median_ms(apply, args.repeat)
        applied = config.read_bytes()
        writes_before = writes
        rerun_ms = median_ms(rerun, args.repeat)
        rerun_writes = writes - writes_before
        unchanged = config.read_bytes() == applied
        baseline_ms = median_ms(baseline, args.repeat)
        parse_ms = median_ms(parse_only, args.repeat)

    lines = len(original.splitlines())
    print(
        f"config.toml: {lines} lines, {args.runtimes} user runtimes; plan: {args.handlers} handlers"
    )
    for label, value in (
        ("apply  (read, merge, atomic write)", apply_ms),
        ("rerun  (read, merge, no change)   ", rerun_ms),
    ):
        print(
            f"{label} {value:7.1f} ms  {value / baseline_ms:5.2f}x tomlkit round-trip  "
            f"{value / parse_ms:5.2f}x tomllib parse"
        )
    print(f"rerun writes: {rerun_writes}; file unchanged: {unchanged}")
    print(f"baseline: tomlkit parse + dump     {baseline_ms:7.1f} ms")
    print(f"baseline: tomllib parse            {parse_ms:7.1f} ms")
    ok = apply_ms < TARGET_MS and rerun_ms < TARGET_MS and rerun_writes == 0 and unchanged
    verdict = "met" if ok else "NOT met"
    print(f"target: apply and rerun under {TARGET_MS:.0f} ms, rerun writes nothing: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
