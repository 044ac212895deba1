"""``wcow-agent merge``: the offline half of the agent (choose the handlers this host can
run, place them as the agent would on this node: its own drop-in, the distribution's
template, or merged into config.toml; a diff of every file, or ``--write``; ``--remove``
takes them out again), for the demo and for nodes managed without Kubernetes."""

from __future__ import annotations

import argparse
import difflib
import json
import ntpath
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wcow_agent.commands.options import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_adopt_flag
from wcow_agent.config.file_set import FileEdit
from wcow_agent.config.file_writes import drop_leftovers, keep_pristine, write_edits
from wcow_agent.config.files import FileLock, LockedError, read_config
from wcow_agent.config.layout import NodeLayout
from wcow_agent.config.merge_decision import ConfigError
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.node_paths import FolderMappedPaths, NodePaths, SamePaths
from wcow_agent.config.placed import Placed
from wcow_agent.config.state import (
    BACKUP_SUFFIX,
    PRISTINE_SUFFIX,
    STATE_SUFFIX,
    Paths,
    StateJournal,
)
from wcow_agent.cycle.eligibility import Host as EligibilityHost
from wcow_agent.cycle.eligibility import Refusal, classify_handlers
from wcow_agent.cycle.handler_placement import NodeText, place_on_node
from wcow_agent.layouts.presets import (
    PRESETS,
    RKE2_DATA_DIR,
    NodeEnvironment,
    preset,
    rke2_layout,
)
from wcow_agent.loop.plan_loading import PlanError, load_plan
from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.wire.plan import PlanEntry

RKE2_V2_TEMPLATE = "config.toml.tmpl"
# The old spelling of a line (``2``) still names its first release.
_LINE_VERSIONS = {"1.6": "1.6.0", "1.7": "1.7.0", "2": "2.0.0"}


def containerd_version(text: str) -> str:
    """``--containerd-version``: a line (``1.7``, ``2.3``, ``2``) or a release (``2.3.4``)."""
    parts = text.split(".")
    if text not in _LINE_VERSIONS and (
        not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts)
    ):
        raise argparse.ArgumentTypeError(f"--containerd-version {text!r}: expected X.Y or X.Y.Z")
    return text


def release(text: str) -> str:
    """The release a ``--containerd-version`` names (a line: its first release)."""
    return _LINE_VERSIONS.get(text) or ".".join([*text.split("."), "0"][:3])


def node_layout(args: argparse.Namespace) -> tuple[NodeLayout, NodePaths]:
    """The layout of the node the file came from, as ``run``'s ``--distribution`` preset has
    it (its drop-in folder and template, found beside ``--config``), each overridden by its
    flag; and how its paths are found here: on Windows as written; elsewhere the node's
    folder of config.toml is the file's folder."""
    config = Path(args.config)
    node = preset(args.distribution, NodeEnvironment())
    if node.template is not None and not args.config_template:
        v2_only = (
            not config.with_name(ntpath.basename(str(node.template))).exists()
            and config.with_name(RKE2_V2_TEMPLATE).exists()
        )
        if v2_only:  # k3s's order: config-v3.toml.tmpl, else config.toml.tmpl
            node = rke2_layout(RKE2_DATA_DIR, NodeEnvironment(), v2_template=True)
    template = _given(args.config_template) or _beside(config, node.template)
    drop_in = _given(args.drop_in_config) or _beside(config, node.drop_in_dir)
    layout = NodeLayout(
        args.distribution,
        config,
        drop_in_dir=drop_in,
        template=template,
        why=f"merge --distribution {args.distribution}",
    )
    if sys.platform == "win32":
        return layout, SamePaths()
    return layout, FolderMappedPaths(config.parent, ntpath.dirname(str(node.config)))


def _given(flag: str | None) -> Path | None:
    return Path(flag) if flag else None


def _beside(config: Path, node_path: Path | None) -> Path | None:
    """A path of the preset's, found relative to ``--config`` as it is to the node's
    config.toml (``conf.d`` beside it, RKE2's template in the same folder)."""
    if node_path is None:
        return None
    return config.parent / ntpath.basename(str(node_path))


def _state_path(config: Path, given: str | None) -> Path:
    return Path(given) if given else config.with_name(config.name + STATE_SUFFIX)


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
    refused: dict[str, Refusal]
    placed: Placed


def _merge_offline(args: argparse.Namespace) -> _OfflineMerge:
    """The handlers this host can run, placed (nothing written yet)."""
    layout, paths = node_layout(args)
    config = layout.config
    host = EligibilityHost(
        parse_windows_build(args.host_build),
        hyperv_available=args.hyperv,
        containerd_version=release(args.containerd_version),
    )
    before = _read_existing(config)
    eligible: dict[str, PlanEntry] = {}
    refused: dict[str, Refusal] = {}
    if not args.remove:
        plan = load_plan(Path(args.plan).read_text(encoding="utf-8"), args.plan)
        eligible, refused = classify_handlers(plan.handlers, host)
    journal, warning = StateJournal.load(_state_path(config, args.state))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    placed = place_on_node(
        NodeFiles(layout, paths),
        NodeText(before, False),
        {handler: entry.runtime for handler, entry in eligible.items()},
        journal.state,
        release(args.containerd_version),
        adopt=args.adopt_handlers,
    )
    return _OfflineMerge(config, journal, before, refused, placed)


def _say_what_merge_does(merge: _OfflineMerge) -> None:
    result, placement = merge.placed.result, merge.placed.placement
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
    print(f"placement: {placement.way} ({placement.reason}): {placement.message}", file=sys.stderr)
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


def _name(edit: FileEdit, config: Path) -> str:
    try:
        return edit.path.relative_to(config.parent).as_posix()
    except ValueError:
        return str(edit.path)


def diff(edits: list[FileEdit], config: Path) -> str:
    """The unified diff of every file the change writes (a created or deleted file against
    /dev/null)."""
    out: list[str] = []
    for edit in edits:
        name = _name(edit, config)
        out += difflib.unified_diff(
            (edit.before or "").splitlines(keepends=True),
            (edit.after or "").splitlines(keepends=True),
            fromfile="/dev/null" if edit.before is None else f"a/{name}",
            tofile="/dev/null" if edit.after is None else f"b/{name}",
        )
    return "".join(out)


def _write_merge(merge: _OfflineMerge, remove: bool) -> None:
    """Write every file (atomically, keeping backups) and the ownership, under the lock."""
    placed, config, journal = merge.placed, merge.config, merge.journal
    edits = placed.edits()
    with FileLock(Paths(config).lock):
        keep_pristine(edits, placed.held_before)
        write_edits(edits)
        for edit in edits:
            what = "deleted" if edit.after is None else "wrote"
            print(f"{what} {edit.path}", file=sys.stderr)
        if edits:
            print(
                "restart containerd to load it (previous files kept as .wcow-backup)",
                file=sys.stderr,
            )
        result = placed.result
        adopted = {
            handler: table
            for handler, table in {**journal.state.adopted, **result.adopted}.items()
            if handler not in result.restored
        }
        journal.merged_offline(result.owned, adopted, (placed.record, placed.adopted_from))
        vacated = [e.path for e in edits if e.path not in placed.holds_after]
        if not result.owned:
            vacated.append(config)
        drop_leftovers(vacated, [e.path for e in edits if e.after is None], placed.folders)
    if remove and not result.owned and not adopted:
        for suffix in (STATE_SUFFIX, BACKUP_SUFFIX, PRISTINE_SUFFIX, ".wcow-lock"):
            config.with_name(config.name + suffix).unlink(missing_ok=True)
        for edit in edits:
            edit.path.with_name(edit.path.name + BACKUP_SUFFIX).unlink(missing_ok=True)


def cmd_merge(args: argparse.Namespace) -> int:
    if not args.remove and not args.plan:
        print("error: --plan is required (or --remove)", file=sys.stderr)
        return EXIT_USAGE
    try:
        merge = _merge_offline(args)
    except (ConfigError, PlanError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    _say_what_merge_does(merge)
    if not args.write:
        sys.stdout.write(diff(merge.placed.edits(), merge.config))
        return EXIT_OK
    try:
        _write_merge(merge, args.remove)
    except LockedError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def add_parser(commands: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="place a plan's handlers in a containerd configuration, offline",
        description="Choose the plan's handlers this host can run and place them as the "
        "agent would on this node: its own drop-in in a folder config.toml imports "
        "(containerd 2.x), the template the distribution renders config.toml from (RKE2), "
        "or merged into config.toml. Prints a unified diff of every file it would write; "
        "--write replaces them atomically, keeps .wcow-backup copies and records what it "
        "owns in a state file; --remove takes the agent's handlers out again. It does not "
        "restart containerd.",
    )
    merge.add_argument("--config", required=True, help="containerd's root config.toml")
    merge.add_argument("--plan", help="plan.json from `wcow render --out` (not with --remove)")
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
        type=containerd_version,
        default="1.7",
        metavar="X.Y[.Z]",
        help="containerd on the host (1.6, 1.7, 2.2, 2.3.4 ...): where the handlers go "
        "(1.x: merged; 2.x: a drop-in where config.toml imports a folder), what that line "
        "drops (such handlers are not eligible), its built-in runtimes and the schema of a "
        "file without `version` (default 1.7)",
    )
    _add_placement_flags(merge)
    merge.add_argument("--state", help=f"ownership state file (default CONFIG{STATE_SUFFIX})")
    add_adopt_flag(merge)
    merge.add_argument("--write", action="store_true", help="write the files instead of a diff")
    merge.add_argument(
        "--remove",
        action="store_true",
        help="take the agent's handlers out (and its import, drop-in, template tables), "
        "giving back the files as they were",
    )
    merge.set_defaults(func=cmd_merge)


def _add_placement_flags(merge: Any) -> None:
    merge.add_argument(
        "--distribution",
        choices=PRESETS,
        default="kubeadm",
        help="the node's distribution, as run's presets have it: its drop-in folder and "
        "template are looked for beside --config, and the paths config.toml names are mapped "
        "to --config's folder off Windows (default kubeadm)",
    )
    merge.add_argument(
        "--drop-in-config",
        metavar="DIR",
        help="a folder for the agent's drop-in that config.toml is made to import when it "
        "imports none (containerd 2.x)",
    )
    merge.add_argument(
        "--config-template",
        metavar="FILE",
        help="the template config.toml is rendered from (rke2: config-v3.toml.tmpl beside "
        "--config)",
    )
