"""The CRD field reference in Markdown, generated from the same schema as the CRD."""

from __future__ import annotations

from typing import Any

from wcow_contract.crd import openapi_schema


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "quantity" if "pattern" in node else "integer or string"
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"[]{_type(node['items'])}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _limits(node: dict[str, Any]) -> str:
    parts = []
    if "minimum" in node or "maximum" in node:
        parts.append(f"{node.get('minimum', '')}..{node.get('maximum', '')}")
    if "maxLength" in node:
        parts.append(f"max {node['maxLength']} chars")
    if "maxItems" in node:
        parts.append(f"max {node['maxItems']} items")
    return f" ({', '.join(parts)})" if parts else ""


def _rows(node: dict[str, Any], path: str, required: bool) -> list[str]:
    description = node.get("description", "").replace("|", "\\|").replace("<", "&lt;")
    marker = " **required**" if required else ""
    rows = [f"| `{path}` | {_type(node)}{_limits(node)}{marker} | {description} |"]
    wanted = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        rows += _rows(child, f"{path}.{name}", name in wanted)
    items = node.get("items", {})
    for name, child in items.get("properties", {}).items():
        rows += _rows(child, f"{path}[].{name}", name in set(items.get("required", [])))
    return rows


def markdown_reference() -> str:
    """A table of every field of spec and status, in schema order."""
    schema = openapi_schema()
    lines = ["| field | type | description |", "| --- | --- | --- |"]
    for section in ("spec", "status"):
        lines += _rows(schema["properties"][section], section, section in schema["required"])
    return "\n".join(lines) + "\n"
