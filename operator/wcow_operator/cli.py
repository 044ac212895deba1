"""``wcow``: render, validate, generate and admit pods, offline (no cluster needed).

Exit codes: 0 success, 1 invalid input (profiles, conflicts, unreadable YAML), 2 usage
(bad flags, a path that does not exist). On any error nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from wcow_contract.catalog.windows_builds import parse_windows_build
from wcow_contract.condition_table import markdown_table as conditions_table
from wcow_contract.crd import custom_resource_definition
from wcow_contract.errors import ProfileInvalidError, parse_profile
from wcow_contract.labels import STARTUP_TAINT
from wcow_contract.reference import markdown_reference
from wcow_contract.v1alpha1 import API_VERSION, KIND, WindowsRuntimeProfile
from wcow_contract.wire.plan import dump_plan
from wcow_operator.registry.client import RegistryClient
from wcow_operator.registry.policy import check_pattern
from wcow_operator.registry.resolver import Resolver
from wcow_operator.render.configmaps import plan_config_map
from wcow_operator.render.node_template import as_document, as_text, node_template
from wcow_operator.render.profile_set import ProfileConflictError, Rendered, render_all
from wcow_operator.render.serialize import dump_yaml, dump_yaml_documents
from wcow_operator.webhook.decide import admit
from wcow_operator.webhook.decision import Refused
from wcow_operator.webhook.image_admission import ImageAdmission
from wcow_operator.webhook.workloads import TEMPLATE_PATHS, PodSource, pods_in

EXIT_INVALID = 1
EXIT_USAGE = 2
DEFAULT_NAMESPACE = "wcow-system"
PROFILE_SUFFIXES = (".yaml", ".yml", ".json")

# Bounds on what one input file may cost. Real manifests stay far below them: the API server
# stores at most 1.5 MiB per object, and CRDs with deep OpenAPI schemas nest ~40 levels.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100  # PyYAML composes recursively: this keeps it far from Python's stack limit
MAX_NODES = 200_000  # per document, aliases counted as often as they are used (alias bombs)


class InputError(Exception):
    """Input that cannot be used; the message names the file and what is wrong."""


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class LoadedProfile:
    source: str
    profile: WindowsRuntimeProfile


def _files(paths: Sequence[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in PROFILE_SUFFIXES
            )
            yield from found
        elif path.is_file():
            yield path
        else:
            raise UsageError(f"{raw}: no such file or directory")


class _TooCostlyError(yaml.YAMLError):
    """A document within YAML's grammar that would cost more than any manifest should."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting and alias expansion beyond the bounds above.

    PyYAML shares an aliased node instead of copying it, so an alias bomb loads quickly and
    explodes later, in whatever walks the result (validation, repr). Counting each node as
    the number of nodes it stands for when expanded catches it while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        alias = self.check_event(yaml.AliasEvent)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooCostlyError(f"nests deeper than {MAX_DEPTH} levels")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        if alias:  # the anchored node, composed before (or still being composed: a cycle)
            if id(node) not in self._expanded:
                raise _TooCostlyError("has an alias inside the node it refers to")
            return node
        self._expanded[id(node)] = self._size(node)
        return node

    def _size(self, node: yaml.Node) -> int:
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            return 1
        size = 1 + sum(self._expanded[id(child)] for child in children)
        if size > MAX_NODES:
            raise _TooCostlyError(
                f"expands to more than {MAX_NODES} nodes through its aliases (an alias bomb?)"
            )
        return size

    def compose_document(self) -> yaml.Node | None:
        self._expanded.clear()  # ids of the previous document's nodes may be reused
        return super().compose_document()


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line for any YAML error (PyYAML's own text spans several, with a source excerpt)."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = " ".join(part for part in (error.context, error.problem) if part)
        return " ".join(f"{what or 'invalid'}{where}".split())
    return " ".join(str(error).split())


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(
                f"{path}: refused: {size / 2**20:.1f} MiB is more than the "
                f"{MAX_FILE_BYTES // 2**20} MiB a profile file may have"
            )
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {' '.join(str(error).split())}") from None
    loader = _BoundedLoader(text)
    index = 1
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            yield index, loader.get_data()
            index += 1
    except _TooCostlyError as error:
        raise InputError(f"{path}: refused: YAML document {index} {error}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML: {_yaml_problem(error)}") from None
    except RecursionError:  # a last guard: the bounds above should make this unreachable
        raise InputError(f"{path}: refused: YAML nested too deeply") from None
    finally:
        loader.dispose()


def load_profiles(paths: Sequence[str]) -> tuple[list[LoadedProfile], list[str]]:
    """Every WindowsRuntimeProfile under ``paths``, and the errors found (all of them)."""
    loaded: list[LoadedProfile] = []
    errors: list[str] = []
    for path in _files(paths):
        try:
            documents = list(_documents(path))
        except InputError as error:
            errors.append(str(error))
            continue
        for index, document in documents:
            where = f"{path} (document {index})"
            if document is None:
                continue
            if not isinstance(document, dict):
                errors.append(f"{where}: expected a Kubernetes object, got {document!r:.80}")
                continue
            if document.get("kind") != KIND:
                continue  # other objects in a GitOps folder are not ours to judge
            if document.get("apiVersion") != API_VERSION:
                errors.append(
                    f"{where}: apiVersion {document.get('apiVersion')!r} is not supported; "
                    f"use {API_VERSION}"
                )
                continue
            try:
                loaded.append(LoadedProfile(str(path), parse_profile(document)))
            except ProfileInvalidError as invalid:
                errors.extend(
                    f"{where}: profile {invalid.name!r}: {problem}" for problem in invalid.problems
                )
    return loaded, errors


def _duplicates(loaded: Sequence[LoadedProfile]) -> list[str]:
    first_source: dict[str, str] = {}
    errors = []
    for item in loaded:
        name = item.profile.name
        if name in first_source:
            other = first_source[name]
            errors.append(f"{item.source}: profile {name!r} is also defined in {other}")
        else:
            first_source[name] = item.source
    return errors


def _load_or_fail(paths: Sequence[str]) -> list[LoadedProfile]:
    loaded, errors = load_profiles(paths)
    errors += _duplicates(loaded)
    if errors:
        _fail(errors)
    if not loaded:
        _fail([f"no {KIND} ({API_VERSION}) found in {', '.join(paths)}"])
    return loaded


def _fail(errors: Sequence[str]) -> NoReturn:
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    raise SystemExit(EXIT_INVALID)


def _render(paths: Sequence[str]) -> Rendered:
    loaded = _load_or_fail(paths)
    try:
        return render_all([item.profile for item in loaded])
    except ProfileConflictError as conflict:
        _fail([str(conflict)])


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", newline="\n", dir=path.parent, delete=False, prefix=f".{path.name}."
    ) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    Path(handle.name).replace(path)


def cmd_render(args: argparse.Namespace) -> int:
    rendered = _render(args.paths)
    if args.out is None:
        documents = [*rendered.runtime_classes, plan_config_map(rendered.plan, args.namespace)]
        sys.stdout.write(dump_yaml_documents(documents))
        return 0
    outputs = {
        "runtimeclasses.yaml": dump_yaml_documents(rendered.runtime_classes),
        "plan.json": dump_plan(rendered.plan),
        **{
            f"containerd-config-v{version}.toml": text
            for version, text in rendered.containerd_toml.items()
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(outputs):
        _write_atomically(out / name, outputs[name])
    count = len(rendered.runtime_classes)
    print(f"rendered {count} profile(s) into {out}: {', '.join(sorted(outputs))}", file=sys.stderr)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    rendered = _render(args.paths)
    for runtime_class in rendered.runtime_classes:
        print(f"ok: {runtime_class['metadata']['name']} (handler {runtime_class['handler']})")
    return 0


def _pods(paths: Sequence[str]) -> Iterator[tuple[str, PodSource]]:
    """Every Pod, workload pod template and List item of those in ``paths`` (other kinds
    are not the webhook's to judge), with the file and document it is in."""
    for path in _files(paths):
        for index, document in _documents(path):
            for source in pods_in(document):
                yield f"{path} (document {index})", source


def _admitted_yaml(where: str, source: PodSource, pod: dict[str, Any]) -> str:
    if not source.workload:
        return f"---\n{dump_yaml(pod)}"
    return (
        f"---\n# {source.what} in {where}: each of its pods as the webhook would admit it "
        f"(the workload itself is never changed)\n{dump_yaml(pod)}"
    )


def cmd_admit(args: argparse.Namespace) -> int:
    loaded = _load_or_fail(args.profiles)
    profiles = {item.profile.name: item.profile for item in loaded}
    admitted: list[str] = []
    errors: list[str] = []
    try:
        pods = list(_pods(args.pods))
    except InputError as error:
        _fail([str(error)])
    if not pods:
        _fail([f"no Pod or workload ({', '.join(TEMPLATE_PATHS)}) found in {', '.join(args.pods)}"])
    decide = _image_admission(args).admit if args.resolve_images else admit
    for where, source in pods:
        if source.pod is None:
            errors.append(f"error: {where}: {source.what}: {source.problem}")
            continue
        decision = decide(source.pod, profiles)
        if isinstance(decision, Refused):
            errors.append(
                f"error: {where}: {source.what} refused ({decision.reason}): {decision.message}"
            )
            continue
        admitted.append(_admitted_yaml(where, source, decision.pod))
        errors += [f"warning: {where}: {source.what}: {w}" for w in decision.warnings]
    sys.stdout.write("".join(admitted))
    for line in errors:
        print(line, file=sys.stderr)
    return EXIT_INVALID if any(line.startswith("error:") for line in errors) else 0


def _image_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resolve-images", action="store_true",
        help="read each container's image from its registry as the webhook does with "
        "--resolve-images: refuse images of a build the class cannot run (ImageBuildMismatch) "
        "and print Hyper-V pods with their images pinned to the guest build's manifest",
    )  # fmt: skip
    parser.add_argument(
        "--insecure-registry", action="append", default=[], metavar="HOST:PORT",
        help="read this registry over plain HTTP (repeatable); all others over HTTPS",
    )  # fmt: skip
    parser.add_argument(
        "--allowed-registries", action="append", default=[], metavar="PATTERN",
        help="a registry that may be read, as a host[:port] glob (repeatable; none: any at a "
        "public address; private addresses only when listed here or as insecure)",
    )  # fmt: skip
    parser.add_argument(
        "--registry-ca-file", metavar="FILE",
        help="PEM bundle of the CAs that sign registries' certificates (default: the system's)",
    )  # fmt: skip


def _image_admission(args: argparse.Namespace) -> ImageAdmission:
    """Anonymous lookups with the webhook's bounds and policy; a registry that cannot be
    read gives a warning (exit 0) unless a profile says spec.images.unreachableRegistry:
    Refuse."""
    try:
        allowed = tuple(check_pattern(p) for p in args.allowed_registries)
    except ValueError as error:
        _fail([f"error: --allowed-registries: {error}"])
    client = RegistryClient(
        insecure=frozenset(args.insecure_registry),
        allowed=allowed,
        ca_file=args.registry_ca_file,
    )
    return ImageAdmission(Resolver(client))


CRD_HEADER = "# Generated from wcow_contract/v1alpha1.py by `wcow crd`. Do not edit.\n"


def cmd_node_template(args: argparse.Namespace) -> int:
    try:
        host = parse_windows_build(args.host_build)
    except ValueError as error:
        raise UsageError(f"--host-build: {error}") from None
    template = node_template([i.profile for i in _load_or_fail(args.profiles)], host, args.hyperv)
    if args.output == "text":
        sys.stdout.write(as_text(template, STARTUP_TAINT))
    elif args.output == "json":
        sys.stdout.write(json.dumps(as_document(template), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(dump_yaml(as_document(template)))
    return EXIT_INVALID if template.conflicts else 0


def crd_yaml() -> str:
    return CRD_HEADER + dump_yaml(custom_resource_definition())


def cmd_crd(args: argparse.Namespace) -> int:
    if args.conditions:
        sys.stdout.write(conditions_table())
    else:
        sys.stdout.write(markdown_reference() if args.reference else crd_yaml())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wcow",
        description="Render WindowsRuntimeProfiles into RuntimeClasses, containerd runhcs "
        "handlers and the node agents' plan, with no cluster.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    render = commands.add_parser(
        "render",
        help="render profiles (files or folders of YAML)",
        description="Without --out, print the RuntimeClasses and the plan ConfigMap as "
        "multi-document YAML for kubectl apply -f - or a GitOps repository. With --out, "
        "write runtimeclasses.yaml, plan.json, containerd-config-v2.toml and "
        "containerd-config-v3.toml into DIR.",
    )
    render.add_argument("paths", nargs="+", metavar="PATH")
    render.add_argument("--out", metavar="DIR", help="write files into DIR instead of stdout")
    render.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the plan ConfigMap (default {DEFAULT_NAMESPACE})",
    )
    render.set_defaults(func=cmd_render)

    validate = commands.add_parser("validate", help="check profiles without rendering")
    validate.add_argument("paths", nargs="+", metavar="PATH")
    validate.set_defaults(func=cmd_validate)

    admission = commands.add_parser(
        "admit",
        help="admit pods as the webhook would (no cluster)",
        description="Print each Pod in the POD files as the admission webhook would admit it "
        "(YAML on stdout), or why it would refuse it (stderr, exit 1); warnings it would "
        "return go to stderr (exit 0). Deployments, StatefulSets, DaemonSets, ReplicaSets, "
        "Jobs, CronJobs and the items of Lists (kubectl get -o yaml) are judged by their pod "
        "template, printed as a Pod under a comment naming the workload; the webhook never "
        "changes a workload, only the pods made from it. A pod is changed only where its "
        "RuntimeClass is a FromPodLimits profile: it gets the VM sizing annotations, and on a "
        "physically backed VM memory requests equal to its limits. On a Fixed profile "
        "nothing is changed (a physically backed Fixed VM is charged to the node through the "
        "RuntimeClass overhead, the whole VM by default); a pod whose limits need a larger "
        "VM is refused (VMTooSmall), or warned about where the profile's "
        "spec.vm.oversizedPods is Warn. Profiles come from --profiles.",
    )
    admission.add_argument(
        "--profiles", action="append", required=True, metavar="PATH",
        help="profile files or folders (repeatable)",
    )  # fmt: skip
    _image_arguments(admission)
    admission.add_argument("pods", nargs="+", metavar="FILE", help="files or folders of "
                           "Pods, workloads or Lists (multi-document YAML or JSON)")  # fmt: skip
    admission.set_defaults(func=cmd_admit)

    _crd_command(commands.add_parser("crd", help="print the WindowsRuntimeProfile CRD"))
    _node_template_command(commands)
    return parser


def _node_template_command(commands: Any) -> None:
    template = commands.add_parser(
        "node-template",
        help="the labels a node group's template must advertise to scale from zero",
        description="For a node group of one Windows build, print which profiles' classes "
        "its nodes can run, the labels its node template must advertise so "
        "cluster-autoscaler or Karpenter scales it up from zero for a pending pod of a "
        "gated class (each with who sets it on a real node), those labels as AWS Auto "
        "Scaling group tags, Azure VM scale set tags and the Cluster API annotation, and "
        "what a pod does on a new node before its agent has proven the handler. Exit 1 "
        "when two of the classes want different values of one label (they need separate "
        "node groups).",
    )
    template.add_argument(
        "--profiles", action="append", required=True, metavar="PATH",
        help="profile files or folders (repeatable)",
    )  # fmt: skip
    template.add_argument(
        "--host-build", required=True, metavar="10.0.N",
        help="the group's Windows build (10.0.<build> or a release name, e.g. ltsc2022)",
    )  # fmt: skip
    template.add_argument(
        "--hyperv", action="store_true",
        help="the group's nodes have Hyper-V (needed for HyperV profiles)",
    )  # fmt: skip
    template.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text")
    template.set_defaults(func=cmd_node_template)


def _crd_command(crd: argparse.ArgumentParser) -> None:
    crd.add_argument(
        "--reference", action="store_true", help="print the field reference as Markdown instead"
    )
    crd.add_argument(
        "--conditions", action="store_true",
        help="print the status conditions and their reasons as a Markdown table instead",
    )  # fmt: skip
    crd.set_defaults(func=cmd_crd)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return result


if __name__ == "__main__":
    raise SystemExit(main())
