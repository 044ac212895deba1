"""Deterministic YAML: same data in, same bytes out, whatever the strings hold (JSON:
``wcow_contract.wire.canonical``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

# libyaml's emitter when PyYAML has it (its wheels do): ~10x faster, same output.
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Safe dumper that never emits aliases (Kubernetes tools dislike &id001 anchors)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line strings as literal blocks read better (TOML in a ConfigMap); PyYAML falls
    # back to quoting by itself when a block cannot hold the string exactly.
    style = "|" if "\n" in value and _block_safe(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _block_safe(value: str) -> bool:
    # A literal block cannot keep trailing spaces on lines, tabs, or other control characters.
    lines = value.split("\n")
    return all(line == line.rstrip(" ") and line.isprintable() for line in lines)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(document: Any) -> str:
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=2**16,
    )


def dump_yaml_documents(documents: Iterable[Any]) -> str:
    return "".join(f"---\n{dump_yaml(document)}" for document in documents)
