"""``wcow-agent``: the Windows node agent (one module per command in ``commands/``).

- ``run``: the DaemonSet's command; watches the plan and keeps this node's handlers
  applied, proven and reported (``loop/``).
- ``merge``: the offline half (choose the handlers this host can run, merge them into
  config.toml), for the demo and for nodes managed without Kubernetes.
- ``uninstall``: remove every table, file, label and annotation the agent owns.
- ``canary``: prove handlers on this node now and print the results (no labels).
- ``simulate``: N simulated Windows nodes running the real agent loop (``simulator/``).

Exit codes: 0 ok, 1 failed (the message says why), 2 usage or environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from wcow_agent.commands import (
    canary_command,
    merge_command,
    run_command,
    simulate_command,
    uninstall_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wcow-agent", description="wcow-runtime node agent")
    commands = parser.add_subparsers(dest="command", required=True)
    merge_command.add_parser(commands)
    run_command.add_parser(commands)
    uninstall_command.add_parser(commands)
    canary_command.add_parser(commands)
    simulate_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result
