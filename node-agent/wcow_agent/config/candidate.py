"""The configuration a change would give containerd, written where ``config dump`` can load
it before anything of the node's is replaced (the transaction's pre-flight).

- merge: the new root, beside the root (its relative imports resolve the same);
- drop-in: the new root with its ``imports`` replaced by the files containerd would load, in
  its order, each changed one by a candidate copy, the agent's drop-in last (no other file
  defines its handlers: that would be a conflict, so its place in the order changes
  nothing). Nested imports of those files are then already loaded and skipped, as they
  are in containerd's own breadth-first walk;
- template: config.toml as rke2 will render it from the new template (the rendered file
  with the agent's tables in it: what the template adds to the base).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from wcow_agent.config.files import read_config
from wcow_agent.config.imports import LoadedFile, load_order
from wcow_agent.config.node_config import NodeFiles
from wcow_agent.config.placed import Placed


@dataclass
class Candidate:
    root: Path
    files: list[Path] = field(default_factory=list)
    """Every temp file written (the root included): removed by ``discard``."""

    def discard(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)


def write_candidate(placed: Placed, files: NodeFiles) -> Candidate:
    root = placed.root.local
    candidate = Candidate(root.with_name(f".{root.name}.candidate.tmp"))
    candidate.files.append(candidate.root)
    way = placed.placement.way
    if way == "template":
        text = placed.rendered if placed.rendered is not None else placed.result.text
    elif way == "drop-in":
        text = _explicit_imports(placed, files, candidate)
    else:
        text = placed.result.text
    candidate.root.write_text(text, encoding="utf-8")
    return candidate


def _explicit_imports(placed: Placed, files: NodeFiles, candidate: Candidate) -> str:
    root = placed.root
    text = placed.result.text
    document = tomllib.loads(text)
    changed = {edit.path: edit.after for edit in placed.others if edit.changed}
    drop_in = placed.placement.target
    skip = {files.paths.written(drop_in)} if drop_in is not None else set()
    order = load_order(
        LoadedFile(root.written, root.local, text, document), files.paths, read_config, skip=skip
    )
    entries = []
    for index, loaded in enumerate(order.imported):
        if loaded.local not in changed:
            entries.append(loaded.written)
            continue
        after = changed[loaded.local]
        if after is not None:
            entries.append(_temp(candidate, root.local, f"import-{index}", after, files))
    ours = changed.get(drop_in) if drop_in is not None and drop_in in changed else None
    if ours is None and drop_in is not None and drop_in not in changed and drop_in.exists():
        ours = read_config(drop_in)
    if ours is not None:
        entries.append(_temp(candidate, root.local, "drop-in", ours, files))
    return tomli_w.dumps({**document, "imports": entries})


def _temp(candidate: Candidate, root: Path, name: str, text: str, files: NodeFiles) -> str:
    path = root.with_name(f".{root.name}.candidate-{name}.tmp")
    path.write_text(text, encoding="utf-8")
    candidate.files.append(path)
    return files.paths.written(path)
