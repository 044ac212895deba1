"""The files one change writes (root, drop-in, template), and the hash of what is on disk.

A change of the agent's handlers may touch several files at once: the drop-in and the
import line of the root, the template, the old place of handlers that move. They are
written together, restarted once and rolled back together (``cycle/transaction.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Role = Literal["config", "drop-in", "template", "import"]
"""What a file is to the agent: containerd's root config; the agent's own drop-in; the
template config.toml is rendered from; another imported file (a table adopted out of it)."""


@dataclass(frozen=True)
class FileEdit:
    path: Path
    before: str | None
    """None: the file does not exist."""
    after: str | None
    """None: the change deletes it."""
    role: Role

    @property
    def changed(self) -> bool:
        return self.before != self.after


def text_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def configuration_hash(root: str, files: Mapping[str, str | None] | None = None) -> str:
    """The hash of the configuration the agent keeps: the root's text, and the text of each
    other file it writes (its drop-in or template; None: absent). With the root alone it is
    the root's own hash, so a node that only ever had merged tables keeps its state's
    hashes across this version of the agent."""
    if not files:
        return text_hash(root)
    parts = {"": text_hash(root)} | {
        name: None if text is None else text_hash(text) for name, text in files.items()
    }
    encoded = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(encoded.encode("utf-8")).hexdigest()
