"""``wcow-agent canary``: prove handlers on this node now and print the results (no labels)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from wcow_agent.commands.options import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    HostFactory,
    add_host_flags,
    real_host,
)
from wcow_agent.cycle.canary import Canary, CanarySpec
from wcow_agent.cycle.decisions import default_canary_image
from wcow_agent.host.interfaces import HostError
from wcow_agent.host.windows import default_work_dir
from wcow_agent.loop.plan_loading import PlanError, load_plan


def add_parser(commands: Any) -> None:
    canary = commands.add_parser(
        "canary",
        help="prove handlers on this node now and print the results as JSON",
        description="Starts a canary sandbox per handler through CRI and checks it "
        "through HCS, as `run` does; prints one JSON object per handler. Touches neither "
        "config.toml nor the Node (use the Node annotation runtime.wcow.dev/canary-request "
        "to have the running agent re-prove and re-label).",
    )
    add_host_flags(canary)
    canary.add_argument("handlers", nargs="+", metavar="HANDLER")
    canary.add_argument("--plan", required=True, help="plan.json holding the handlers")
    canary.set_defaults(func=cmd_canary)


def cmd_canary(args: argparse.Namespace) -> int:
    return run_canaries(args, real_host)


def run_canaries(args: argparse.Namespace, host_factory: HostFactory) -> int:
    stop = threading.Event()
    try:
        plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
        host = host_factory(args, stop)
    except (PlanError, OSError, HostError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    unknown = [h for h in args.handlers if h not in plan.handlers]
    if unknown:
        print(f"error: not in the plan: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    canary = Canary(host.cri, host.hcs, args.work_dir or default_work_dir())
    code = EXIT_OK
    for handler in args.handlers:
        entry = plan.handlers[handler]
        build = host.windows.windows_build().label_value
        image = default_canary_image(entry, build, dict(args.canary_image))
        result = canary.run(CanarySpec.from_plan(handler, entry, image), stop)
        print(
            json.dumps(
                {
                    "handler": handler,
                    "passed": result.passed,
                    "reason": result.reason,
                    "message": result.message,
                    "durationSeconds": round(result.duration_seconds, 3),
                    "observed": dict(result.observed),
                },
                sort_keys=True,
            )
        )
        code = code if result.passed else EXIT_FAILED
    return code
