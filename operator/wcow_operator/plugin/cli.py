"""``kubectl-wcow``: the kubectl plugin (kubectl finds ``kubectl-wcow`` on PATH and runs it
for ``kubectl wcow ...``).

    kubectl wcow status [-n NAMESPACE] [-o table|json]
    kubectl wcow diagnose [-n NAMESPACE] [--node NODE] [-o DIR]
    kubectl wcow verify [-n NAMESPACE] [--profile NAME]... [--image IMAGE] [--timeout-seconds N]

status and diagnose only read: they need the chart's ``<fullname>-viewer`` ClusterRole and
Role and nothing more. verify creates and deletes one pod per profile in NAMESPACE (the
chart's ``helm test`` runs it). Exit codes: 0 done (verify: nothing failed), 1 the cluster
could not be read or a check failed, 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from wcow_contract.text import printable
from wcow_operator.controller.cluster_api import ApiError
from wcow_operator.k8s.prober import PodProber
from wcow_operator.k8s.reader import ClusterReader, kubeconfig_client
from wcow_operator.plugin import probe, status, table
from wcow_operator.plugin.collect import collect
from wcow_operator.plugin.diagnose_bundle import write_bundle

EXIT_CLUSTER = 1
EXIT_USAGE = 2
DEFAULT_NAMESPACE = "wcow-system"
# containerd 2.x's default sandbox image: its Windows entries are on every node already.
CHECK_IMAGE = "registry.k8s.io/pause:3.10"
HINT = (
    "a read-only user needs the chart's <release>-wcow-runtime-viewer ClusterRole and Role "
    "(docs/install.md, 'kubectl wcow')"
)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    common.add_argument("--context", help="kubeconfig context (default: the current one)")
    common.add_argument(
        "-n",
        "--namespace",
        default=os.environ.get("WCOW_NAMESPACE") or DEFAULT_NAMESPACE,
        help="the operator's namespace (env WCOW_NAMESPACE, default wcow-system)",
    )
    parser = argparse.ArgumentParser(
        prog="kubectl wcow", description="Status and diagnostics of wcow-runtime (read-only)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser(
        "status", parents=[common], help="profiles, rollout progress per profile, Windows nodes"
    )
    show.add_argument("-o", "--output", choices=("table", "json"), default="table")
    diagnose = commands.add_parser(
        "diagnose",
        parents=[common],
        help="a tar.gz of what it takes to diagnose a node or a rollout, credentials redacted",
    )
    diagnose.add_argument("--node", help="only this Windows node's objects and agent logs")
    diagnose.add_argument(
        "-o", "--output-dir", default=".", help="folder for the bundle (default: here)"
    )
    check = commands.add_parser(
        "verify",
        parents=[common],
        help="per profile, run a pod of its RuntimeClass on a ready node (in --namespace)",
    )
    check.add_argument("--profile", action="append", default=[], help="only this profile")
    check.add_argument("--image", default=CHECK_IMAGE, help=f"the pod's image ({CHECK_IMAGE})")
    check.add_argument("--timeout-seconds", type=int, default=300, help="per pod (5 to 3600)")
    return parser


def _verify(args: argparse.Namespace) -> tuple[str, int]:
    if not 5 <= args.timeout_seconds <= 3600:
        raise UsageError(f"--timeout-seconds must be 5 to 3600, not {args.timeout_seconds}")
    prober = PodProber(kubeconfig_client(args.kubeconfig, args.context))
    results = probe.run(prober, args.namespace, args.image, args.timeout_seconds, args.profile)
    failed = any(r.outcome == "failed" for r in results)
    return probe.render(results) or "No WindowsRuntimeProfiles.\n", EXIT_CLUSTER if failed else 0


def _status(reader: ClusterReader, namespace: str, output: str) -> str:
    profiles = reader.profiles()
    nodes = reader.windows_nodes(metadata_only=True)
    maps = reader.plan_and_rollout(namespace)
    report = status.report(
        namespace=namespace,
        profiles=profiles,
        nodes=nodes,
        config_maps=maps,
    )
    return report.as_json() if output == "json" else table.render(report)


def _diagnose(reader: ClusterReader, namespace: str, node: str | None, folder: Path) -> str:
    if not folder.is_dir():
        raise UsageError(f"--output-dir {folder}: no such folder")
    now = datetime.now(UTC)
    found = collect(reader, namespace, node, now)
    top = f"wcow-diagnose-{now.strftime('%Y%m%dT%H%M%SZ')}"
    path = write_bundle(found.files, folder / f"{top}.tar.gz", top, now.timestamp())
    lines = [f"wrote {path} ({len(found.files)} files)"]
    lines += [f"  could not read: {p}" for p in found.problems]
    lines += [f"  note: {n}" for n in found.notes]
    return "\n".join(lines) + "\n"


def _said(error: ApiError) -> str:
    """What went wrong, without the status 0 of a request nobody answered."""
    return f"{error.reason}: {error.message}" if not error.status else str(error)


class UsageError(Exception):
    pass


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on escaped (escape sequences,
    other control and bidi characters), its line breaks kept: statuses, node reports and API
    errors are written by others (a tenant, a node), and an OSC sequence in one could set the
    reader's clipboard or rewrite the screen."""
    return "\n".join(printable(line, len(line) * 10 + 16) for line in text.split("\n"))


def _out(text: str) -> None:
    sys.stdout.write(terminal_safe(text))


def _err(text: str) -> None:
    sys.stderr.write(terminal_safe(text))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "verify":
            text, code = _verify(args)
            _out(text)
            return code
        reader = ClusterReader(kubeconfig_client(args.kubeconfig, args.context))
        if args.command == "status":
            _out(_status(reader, args.namespace, args.output))
        else:
            _out(_diagnose(reader, args.namespace, args.node, Path(args.output_dir)))
    except UsageError as error:
        _err(f"kubectl wcow: {error}\n")
        return EXIT_USAGE
    except ApiError as error:
        forbidden = f"\n{HINT}" if error.status == 403 else ""
        _err(f"kubectl wcow: {_said(error)}{forbidden}\n")
        return EXIT_CLUSTER
    return 0


if __name__ == "__main__":
    sys.exit(main())
