"""``wcow``: render, validate and generate, offline (no cluster needed).

Exit codes: 0 success, 1 invalid input (profiles, conflicts, unreadable YAML), 2 usage
(bad flags, a path that does not exist). On any error nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from wcow_operator.api.crd import custom_resource_definition
from wcow_operator.api.errors import ProfileInvalidError, parse_profile
from wcow_operator.api.reference import markdown_reference
from wcow_operator.api.v1alpha1 import API_VERSION, KIND, WindowsRuntimeProfile
from wcow_operator.render.bundle import ProfileConflictError, Rendered, render_all
from wcow_operator.render.plan import dump_plan, plan_config_map
from wcow_operator.render.serialize import dump_yaml, dump_yaml_documents

EXIT_INVALID = 1
EXIT_USAGE = 2
DEFAULT_NAMESPACE = "wcow-system"
PROFILE_SUFFIXES = (".yaml", ".yml", ".json")


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


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    try:
        yield from enumerate(yaml.safe_load_all(text), start=1)
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML: {error}") from None


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


CRD_HEADER = "# Generated from wcow_operator/api/v1alpha1.py by `wcow crd`. Do not edit.\n"


def crd_yaml() -> str:
    return CRD_HEADER + dump_yaml(custom_resource_definition())


def cmd_crd(args: argparse.Namespace) -> int:
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

    crd = commands.add_parser("crd", help="print the WindowsRuntimeProfile CRD")
    crd.add_argument(
        "--reference", action="store_true", help="print the field reference as Markdown instead"
    )
    crd.set_defaults(func=cmd_crd)
    return parser


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
