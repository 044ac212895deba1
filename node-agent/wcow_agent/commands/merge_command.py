"""``wcow-agent merge``: the offline half of the agent (choose the handlers this host can
run, merge them into config.toml; a diff, or ``--write``), for the demo and for nodes
managed without Kubernetes."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_agent.commands.options import EXIT_FAILED, EXIT_OK, add_adopt_flag
from wcow_agent.config.files import FileLock, LockedError, read_config, write_atomically
from wcow_agent.config.merge import MergeResult, merge_config
from wcow_agent.config.merge_decision import BUILTIN_RUNTIMES_1_6, BUILTIN_RUNTIMES_1_7, ConfigError
from wcow_agent.config.state import PRISTINE_SUFFIX, STATE_SUFFIX, Paths, StateJournal
from wcow_agent.cycle.eligibility import Host as EligibilityHost
from wcow_agent.cycle.eligibility import Refusal, classify_handlers
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.catalog.windows_builds import parse_windows_build


def _state_path(config: Path, given: str | None) -> Path:
    return Path(given) if given else config.with_name(config.name + STATE_SUFFIX)


# --containerd-version names a line; eligibility judges by its first release.
_LINE_VERSIONS = {"1.6": "1.6.0", "1.7": "1.7.0", "2": "2.0.0"}


def _read_existing(config: Path) -> str:
    if not config.exists():
        raise ConfigError(
            f"{config} does not exist: the agent never writes a config.toml holding only "
            "its own tables; create it with `containerd config default` first"
        )
    return read_config(config)


@dataclass(frozen=True)
class _OfflineMerge:
    config: Path
    journal: StateJournal
    before: str
    pristine: str | None
    refused: dict[str, Refusal]
    result: MergeResult

    @property
    def pristine_path(self) -> Path:
        return self.config.with_name(self.config.name + PRISTINE_SUFFIX)


def _merge_offline(args: argparse.Namespace) -> _OfflineMerge:
    """The handlers this host can run, merged into the file (nothing written yet)."""
    config = Path(args.config)
    host = EligibilityHost(
        parse_windows_build(args.host_build),
        hyperv_available=args.hyperv,
        containerd_version=_LINE_VERSIONS[args.containerd_version],
    )
    plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
    before = _read_existing(config)
    eligible, refused = classify_handlers(plan.handlers, host)
    journal, warning = StateJournal.load(_state_path(config, args.state))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    pristine_path = config.with_name(config.name + PRISTINE_SUFFIX)
    pristine = read_config(pristine_path) if pristine_path.exists() else None
    builtins = BUILTIN_RUNTIMES_1_6 if args.containerd_version == "1.6" else BUILTIN_RUNTIMES_1_7
    result = merge_config(
        before,
        {handler: entry.runtime for handler, entry in eligible.items()},
        journal.state.owned,
        builtins,
        pristine,
        fallback_version=3 if args.containerd_version == "2" else 2,
        adopt=args.adopt_handlers,
        adopted=journal.state.adopted,
    )
    return _OfflineMerge(config, journal, before, pristine, refused, result)


def _say_what_merge_does(merge: _OfflineMerge) -> None:
    result = merge.result
    for handler, why in merge.refused.items():
        print(f"not eligible: {handler}: {why.message}", file=sys.stderr)
    for handler, reason in result.conflicts.items():
        print(f"conflict: {handler}: {reason}", file=sys.stderr)
    for handler, table in sorted(result.adopted.items()):
        print(
            f"adopted: {handler}: replaces the hand-written table "
            f"{json.dumps(table, sort_keys=True)} (kept in {merge.journal.path.name}, written "
            "back when the handler leaves the plan)",
            file=sys.stderr,
        )
    for handler in result.restored:
        print(f"restored: {handler}: the hand-written table the agent had adopted", file=sys.stderr)
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


def _write_merge(merge: _OfflineMerge) -> None:
    """Write the file (atomically, keeping a backup) and the ownership, under the lock."""
    result, config, journal = merge.result, merge.config, merge.journal
    with FileLock(Paths(config).lock):
        if result.owned and not journal.state.owned and merge.pristine is None:
            # The file before the agent's first change: removing everything restores it.
            write_atomically(merge.pristine_path, merge.before, backup=False)
        if result.changed(merge.before):
            write_atomically(config, result.text)
            print(
                f"wrote {config} (previous file kept as {config.name}.wcow-backup); "
                "restart containerd to load it",
                file=sys.stderr,
            )
        adopted = {
            handler: table
            for handler, table in {**journal.state.adopted, **result.adopted}.items()
            if handler not in result.restored
        }
        journal.merged_offline(result.owned, adopted)
        if not result.owned:
            merge.pristine_path.unlink(missing_ok=True)


def cmd_merge(args: argparse.Namespace) -> int:
    try:
        merge = _merge_offline(args)
    except (ConfigError, PlanError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    _say_what_merge_does(merge)
    if not args.write:
        sys.stdout.write(merge.result.diff(merge.before, merge.config.name))
        return EXIT_OK
    try:
        _write_merge(merge)
    except LockedError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def add_parser(commands: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="merge a plan into a containerd config.toml, offline",
        description="Choose the plan's handlers this host can run and merge them into "
        "config.toml. Prints a unified diff; --write replaces the file atomically, keeps a "
        ".wcow-backup copy and records the tables it owns in a state file. It does not "
        "restart containerd.",
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
        help="containerd on the host: handlers needing settings it drops are not eligible "
        "(1.6 drops DefaultContainerAnnotations and ScrubLogs); also its built-in runtimes "
        "and the schema of a file without `version` (default 1.7)",
    )
    merge.add_argument("--state", help=f"ownership state file (default CONFIG{STATE_SUFFIX})")
    add_adopt_flag(merge)
    merge.add_argument("--write", action="store_true", help="write the file instead of a diff")
    merge.set_defaults(func=cmd_merge)
