"""Turn a profile document into a model, or into problems that name field and value."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from wcow_contract.v1alpha1 import FieldError, WindowsRuntimeProfile

_MISSING = object()
_FIELD_TOKEN = re.compile(r"\[([^\]]*)\]|([^.\[]+)")
VALUE_SHOWN_MAX = 200

# What to write instead, for a value of the wrong JSON type: the model is as strict as the
# CRD's schema, so "4096", "yes" and 2.0 are refused, not read as 4096, true and 2.
_JSON_TYPE: dict[type, str] = {
    bool: "a boolean",
    int: "an integer",
    float: "a number with a decimal point",
    str: "a string",
    list: "a list",
    dict: "a map",
}
_WANTED = {
    "int_type": "must be an integer (a number without quotes and without a decimal point)",
    "bool_type": "must be true or false, without quotes",
    "string_type": "must be a string",
    "dict_type": "must be a map",
    "model_type": "must be an object (a map of fields)",
    "list_type": "must be a list",
}


def _wrong_type(kind: str, value: Any) -> str | None:
    wanted = _WANTED.get(kind)
    if wanted is None or value is _MISSING:
        return None
    return f"{wanted}, not {_JSON_TYPE.get(type(value), type(value).__name__)}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a profile: where (``spec.vm.memoryMB``), what was there, why."""

    field: str
    message: str
    value: Any = _MISSING

    def __str__(self) -> str:
        if self.value is _MISSING:
            return f"{self.field}: {self.message}"
        shown = repr(self.value)  # escapes control characters; bounded: it may be anyone's text
        if len(shown) > VALUE_SHOWN_MAX:
            shown = f"{shown[:VALUE_SHOWN_MAX]}... ({len(shown)} characters)"
        return f"{self.field}: {self.message} (got {shown})"


class ProfileInvalidError(ValueError):
    """A profile that must not reach a node; carries every problem found."""

    def __init__(self, name: str, problems: list[Problem]) -> None:
        self.name = name
        self.problems = problems
        super().__init__(
            f"WindowsRuntimeProfile {name!r} is invalid: " + "; ".join(map(str, problems))
        )


def _walk(document: Any, loc: tuple[str | int, ...], keep_from: int) -> tuple[list[str], Any]:
    """Follow ``loc`` through the document and return the path walked and the value there.

    Segments before ``keep_from`` that are not in the document are pydantic's union tags
    (``int``, ``str``) and are dropped; later ones name fields that may be absent.
    """
    path: list[str] = []
    node = document
    for index, segment in enumerate(loc):
        in_dict = isinstance(node, dict) and segment in node
        in_list = isinstance(node, list) and isinstance(segment, int) and segment < len(node)
        if in_dict or in_list:
            node = node[segment]
        elif index >= keep_from:
            node = _MISSING
        else:
            continue
        text = str(segment)
        bracket = isinstance(segment, int) or not text.isidentifier()
        path.append(f"[{text}]" if bracket else text)
    return path, node


def _join(parts: list[str]) -> str:
    text = ""
    for part in parts:
        text += part if part.startswith("[") or not text else f".{part}"
    return text


def problems_from(error: ValidationError, document: Any) -> list[Problem]:
    problems = []
    for detail in error.errors(include_url=False):
        loc = tuple(detail["loc"])
        keep_from = len(loc) - 1 if detail["type"] == "missing" else len(loc)
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            loc = loc + tuple(_split_field(cause.field))
            message = str(cause)
        else:
            message = detail["msg"]
            if message.startswith("Value error, "):
                message = message.removeprefix("Value error, ")
        parts, value = _walk(document, loc, keep_from)
        if detail["type"] == "missing":
            message = "is required"
        elif detail["type"] == "extra_forbidden":
            message = "is not a field of WindowsRuntimeProfile v1alpha1 (misspelt?)"
        else:
            message = _wrong_type(detail["type"], value) or message
        problems.append(Problem(_join(parts) or "(document)", message, value))
    return problems


def _split_field(field: str) -> list[str]:
    # "scheduling.nodeSelector[kubernetes.io/os]" -> [scheduling, nodeSelector, kubernetes.io/os]
    return [bracketed or plain for bracketed, plain in _FIELD_TOKEN.findall(field)]


def parse_profile(document: Any) -> WindowsRuntimeProfile:
    """Validate one WindowsRuntimeProfile document (dict as from YAML or the API)."""
    name = "<unnamed>"
    if isinstance(document, dict):
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            name = metadata["name"]
    try:
        return WindowsRuntimeProfile.model_validate(document)
    except ValidationError as error:
        raise ProfileInvalidError(name, problems_from(error, document)) from None
