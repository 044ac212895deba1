"""``wcow-agent``: the Windows node agent.

Only ``merge`` exists so far: the offline half of the agent (choose the handlers this host
can run, merge them into config.toml), for the demo and for nodes managed without
Kubernetes. ``run`` and ``uninstall`` come with the node agent's issue.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from wcow_agent.eligibility import Host, choose_handlers
from wcow_agent.files import read_config, write_atomically
from wcow_agent.merge import BUILTIN_RUNTIMES_1_6, BUILTIN_RUNTIMES_1_7, ConfigError, merge_config
from wcow_agent.plan import PlanError, load_plan
from wcow_operator.api.windows_builds import parse_windows_build

EXIT_INVALID = 1
STATE_SUFFIX = ".wcow-state.json"
PRISTINE_SUFFIX = ".wcow-original"


def _state_path(config: Path, given: str | None) -> Path:
    return Path(given) if given else config.with_name(config.name + STATE_SUFFIX)


def _read_owned(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    owned = json.loads(path.read_text(encoding="utf-8")).get("owned", {})
    return {str(k): str(v) for k, v in owned.items()}


def _read_existing(config: Path) -> str:
    if not config.exists():
        raise ConfigError(
            f"{config} does not exist: the agent never writes a config.toml holding only "
            "its own tables; create it with `containerd config default` first"
        )
    return read_config(config)


def cmd_merge(args: argparse.Namespace) -> int:
    config = Path(args.config)
    try:
        host = Host(parse_windows_build(args.host_build), hyperv_available=args.hyperv)
        plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
        before = _read_existing(config)
        eligible, refused = choose_handlers(plan["handlers"], host)
        state = _state_path(config, args.state)
        owned = _read_owned(state)
        pristine_path = config.with_name(config.name + PRISTINE_SUFFIX)
        pristine = read_config(pristine_path) if pristine_path.exists() else None
        builtins = (
            BUILTIN_RUNTIMES_1_6 if args.containerd_version == "1.6" else BUILTIN_RUNTIMES_1_7
        )
        result = merge_config(
            before,
            {handler: entry["runtime"] for handler, entry in eligible.items()},
            owned,
            builtins,
            pristine,
        )
    except (ConfigError, PlanError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID

    for handler, reason in refused.items():
        print(f"not eligible: {handler}: {reason}", file=sys.stderr)
    for handler, reason in result.conflicts.items():
        print(f"conflict: {handler}: {reason}", file=sys.stderr)
    summary = ", ".join(
        f"{label} {', '.join(names)}"
        for label, names in (
            ("added", result.added),
            ("updated", result.updated),
            ("removed", result.removed),
        )
        if names
    )
    print(f"config version {result.version}: {summary or 'no change'}", file=sys.stderr)
    if not args.write:
        sys.stdout.write(result.diff(before, config.name))
        return 0
    if result.owned and not owned and pristine is None:
        # The file before the agent's first change, so that removing everything restores it.
        write_atomically(pristine_path, before, backup=False)
    if result.changed(before):
        write_atomically(config, result.text)
        print(f"wrote {config} (previous file kept as {config.name}.wcow-backup)", file=sys.stderr)
    write_atomically(
        state, json.dumps({"owned": result.owned}, indent=2, sort_keys=True) + "\n", backup=False
    )
    if not result.owned:
        pristine_path.unlink(missing_ok=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wcow-agent", description="wcow-runtime node agent")
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge",
        help="merge a plan into a containerd config.toml, offline",
        description="Choose the plan's handlers this host can run and merge them into "
        "config.toml. Prints a unified diff; --write replaces the file atomically, keeps a "
        ".wcow-backup copy and records the tables it owns in a state file.",
    )
    merge.add_argument("--config", required=True, help="containerd config.toml")
    merge.add_argument("--plan", required=True, help="plan.json from `wcow render --out`")
    merge.add_argument(
        "--host-build",
        required=True,
        metavar="10.0.N",
        help="the host's Windows build (node.kubernetes.io/windows-build)",
    )
    merge.add_argument(
        "--no-hyperv",
        dest="hyperv",
        action="store_false",
        help="the host cannot run Hyper-V isolated containers",
    )
    merge.add_argument(
        "--containerd-version",
        choices=("1.6", "1.7", "2"),
        default="1.7",
        help="containerd on the host, for its built-in runtimes (default 1.7)",
    )
    merge.add_argument("--state", help=f"ownership state file (default CONFIG{STATE_SUFFIX})")
    merge.add_argument("--write", action="store_true", help="write the file instead of a diff")
    merge.set_defaults(func=cmd_merge)
    for name, text in (
        ("run", "watch the plan and keep this node's handlers applied and proven"),
        ("uninstall", "remove every table and label the agent owns"),
    ):
        commands.add_parser(name, help=f"{text} (not implemented yet)").set_defaults(
            func=_not_implemented
        )
    return parser


def _not_implemented(args: argparse.Namespace) -> int:
    print(f"wcow-agent {args.command}: not implemented yet", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result
