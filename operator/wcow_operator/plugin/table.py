"""``kubectl wcow status`` as text: the report in kubectl-style columns (no API calls)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from wcow_contract.wire.rollout import RESUME_ANNOTATION
from wcow_operator.plugin.status import Report

MAX_ROLLOUT_LINES: Final = 50  # nodes not done, listed with why; the rest are counted
RESUME: Final = (
    "after fixing the failed nodes: "
    "kubectl annotate wrp {names} {annotation}=$(date +%s) --overwrite"
)


def columns(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, two spaces apart, as ``kubectl get`` prints them."""
    cells = [[str(h) for h in headers], *([str(c) if c != "" else "-" for c in r] for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _profiles(report: Report) -> str:
    rows = [
        (
            p.name,
            p.isolation,
            p.build,
            p.handler,
            p.ready if p.ready == "True" else f"{p.ready} ({p.ready_reason})",
            f"{p.ready_nodes}/{p.eligible}",
            p.failed,
            p.rolled_out,
        )
        for p in report.profiles
    ]
    headers = ("PROFILE", "ISOLATION", "BUILD", "HANDLER", "READY", "NODES", "FAILED", "ROLLED OUT")
    return columns(headers, rows) if rows else "No WindowsRuntimeProfiles.\n"


def _rollout(report: Report) -> str:
    rollout = report.rollout
    if rollout is None:
        return "Rollout: none yet.\n"
    head = (
        f"Rollout of plan {rollout.plan_hash[:19]}: maxUnavailable {rollout.max_unavailable}, "
        f"changed {', '.join(rollout.changed_handlers) or 'nothing'}"
    )
    changed = [p for p in report.profiles if p.rollout is not None]
    if rollout.halted:
        halted = rollout.halted
        names = " ".join(p.name for p in changed) or "NAME"
        head += f"\nHALTED since {halted['since']}: {halted['reason']}: {halted['message']}"
        head += "\n  resume " + RESUME.format(names=names, annotation=RESUME_ANNOTATION)
    for name, hold in rollout.held.items():
        head += (
            f"\nHELD BACK since {hold['since']}: profile {name} (handler {hold['handler']}, "
            f"generation {hold['generation']}): {hold['reason']}: {hold['message']}"
        )
        head += "\n  fix the spec, or send it out again " + RESUME.format(
            names=name, annotation=RESUME_ANNOTATION
        )
    text = head + "\n\n"
    if changed:
        states = ("done", "applying", "waiting", "failed")
        rows = [(p.name, p.handler, *(p.rollout[s] for s in states)) for p in changed if p.rollout]
        text += columns(("PROFILE", "HANDLER", "DONE", "APPLYING", "WAITING", "FAILED"), rows)
    pending = [n for n in report.nodes if n.rollout not in ("done", "")]
    if pending:
        rows = [(n.name, n.rollout, n.why) for n in pending[:MAX_ROLLOUT_LINES]]
        text += "\n" + columns(("NODE", "ROLLOUT", "WHY"), rows)
        if len(pending) > MAX_ROLLOUT_LINES:
            more = len(pending) - MAX_ROLLOUT_LINES
            text += f"... and {more} more nodes not done (-o json lists all)\n"
    return text


def _nodes(report: Report) -> str:
    if not report.nodes:
        return "No Windows nodes.\n"
    rows = [
        (
            n.name,
            n.build,
            n.hyperv,
            n.containerd,
            n.containerd_line,
            ",".join(n.guest_builds),
            n.plan,
            " ".join(f"{h}={s}" for h, s in n.handlers.items()),
        )
        for n in report.nodes
    ]
    headers = (
        "NODE",
        "BUILD",
        "HYPERV",
        "CONTAINERD",
        "LINE",
        "GUEST BUILDS",
        "PLAN",
        "HANDLERS",
    )
    return columns(headers, rows)


def render(report: Report) -> str:
    notes = "".join(f"note: {n}\n" for n in report.notes)
    return "\n".join((_profiles(report), _rollout(report), _nodes(report))) + (
        f"\n{notes}" if notes else ""
    )
