"""The plan's handlers put where ``placement`` decided, on the node's files (pure: texts in,
texts out; the cycle reads and writes them).

One call does all of a change: it takes the agent's tables out of their old place when the
placement changed (containerd upgraded from 1.7 to 2.2, a template removed ...), gives
back hand-written tables it no longer needs, judges every desired handler against the
tables of every file containerd loads (a table of that name in a file the agent does not
own is a conflict, or adopted with ``--adopt-handlers``: taken out of its file, kept in the
state and written back when the agent lets go), and writes the new place: merged tables
(``merge``), the agent's own drop-in and at most the import of its folder in the root
(``drop_in``), or the agent's tables in the template (``template``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wcow_agent.config.drop_in import drop_in_tables, is_agents, render_drop_in
from wcow_agent.config.effective import defined_handlers, handlers_by_file, replaces_cri_1x
from wcow_agent.config.file_set import FileEdit, Role
from wcow_agent.config.imports import LoadedFile, LoadOrder, declared_imports
from wcow_agent.config.merge import MergeResult, merge_config
from wcow_agent.config.merge_decision import ConfigError, table_hash
from wcow_agent.config.placed import NodeConfig, Ownership, Placed, Settings, Tables
from wcow_agent.config.placement import Placement, root_schema
from wcow_agent.config.placement_record import PlacementRecord
from wcow_agent.config.root_imports import with_import, without_import
from wcow_agent.config.template import agent_handlers, agent_tables, template_with


class _Texts:
    """The files' texts as the change goes, by local path."""

    def __init__(self, node: NodeConfig) -> None:
        self.root = node.root
        self.before: dict[Path, str | None] = {f.local: f.text for f in node.order.files}
        self.before.update(node.texts)
        self.now = dict(self.before)
        self.roles: dict[Path, Role] = {}

    def get(self, path: Path) -> str | None:
        return self.now.get(path)

    def set(self, path: Path, text: str | None, role: Role) -> None:
        self.now[path] = text
        self.roles.setdefault(path, role)

    def others(self) -> tuple[FileEdit, ...]:
        return tuple(
            FileEdit(p, self.before.get(p), self.now[p], role)
            for p, role in self.roles.items()
            if p != self.root.local
        )


def place_handlers(
    placement: Placement,
    node: NodeConfig,
    desired: Tables,
    ownership: Ownership,
    settings: Settings,
) -> Placed:
    """The node's files with exactly ``desired`` as the agent's handlers, where
    ``placement`` says (a placement of no way: only what the agent had is taken out)."""
    if placement.way is None and desired:
        raise ConfigError(placement.message)
    _refuse_1x_imports(placement, node.order)
    texts = _Texts(node)
    step = _Step(placement, node, texts, ownership, settings)
    step.release()
    wanted = step.judge(desired)
    result = step.write(wanted)
    step.restore_pristine(result)
    root_text = texts.get(node.root.local) or ""
    result = MergeResult(
        text=root_text,
        version=result.version,
        added=[h for h in result.added if h not in step.moved],
        updated=sorted({*result.updated, *(h for h in result.added if h in step.moved)}),
        removed=sorted(set(result.removed) | step.released),
        conflicts={**step.conflicts, **result.conflicts},
        owned=result.owned,
        adopted={**step.adopted, **result.adopted},
        restored=sorted(set(result.restored) | step.restored),
    )
    record = step.record(result)
    return Placed(
        placement,
        result,
        node.root,
        node.created,
        texts.others(),
        record,
        step.adopted_from,
        tuple(sorted(step.moved & set(result.owned))),
        step.rendered,
        step.holders(ownership.record, ownership.owned, ownership.adopted_from),
        step.holders(record, result.owned, step.adopted_from),
        step.folders(record),
    )


def _refuse_1x_imports(placement: Placement, order: LoadOrder) -> None:
    if order.problem is not None:
        raise ConfigError(f"containerd would not start with this configuration: {order.problem}")
    if placement.way == "merge" and placement.whole_plugins:
        replacing = [f.written for f in order.imported if replaces_cri_1x(f.document)]
        if replacing:
            raise ConfigError(
                f"{', '.join(replacing)}, imported by the root, sets CRI plugin settings: "
                "containerd 1.x then drops every CRI setting of the root (its handlers and "
                "the agent's), so the agent does not merge there. Move those settings into "
                "the root file"
            )


class _Step:
    """One placement, step by step (release the old place, judge, write the new one)."""

    def __init__(
        self,
        placement: Placement,
        node: NodeConfig,
        texts: _Texts,
        ownership: Ownership,
        settings: Settings,
    ) -> None:
        self.placement, self.node, self.texts = placement, node, texts
        self.ownership, self.settings = ownership, settings
        record, root = ownership.record, node.root
        self.old_way = record.way if record is not None else "merge"
        self.old_target = Path(record.target) if record is not None else root.local
        had = record is not None or bool(ownership.owned)
        if record is None and placement.way == "drop-in":
            had = had or bool(agent_handlers(root.text))  # a state lost: the markers say
        self.moving = had and (placement.way != self.old_way or placement.target != self.old_target)
        self.owned: dict[str, str] = {} if self.moving else dict(ownership.owned)
        self.in_place: dict[str, Mapping[str, Any]] = {
            h: t for h, t in ownership.adopted.items() if h not in ownership.adopted_from
        }
        self.adopted_from: dict[str, str] = dict(ownership.adopted_from)
        self.adopted: dict[str, dict[str, Any]] = {}
        self.conflicts: dict[str, str] = {}
        self.released: set[str] = set()
        self.restored: set[str] = set()
        self.moved: set[str] = set()
        self.rendered: str | None = None
        self.import_added = record.import_added if record is not None and not self.moving else None
        self.line_added = record.line_added if record is not None and not self.moving else False
        self.created_target = False

    # -- the old place -------------------------------------------------------------------

    def release(self) -> None:
        """When the placement changed: the agent's tables out of their old place, and
        every table it adopted out of another file back where it was."""
        if not self.moving:
            return
        self.moved = {h for h, mark in self.ownership.owned.items() if mark != "seeded"}
        record, root = self.ownership.record, self.node.root.local
        if self.old_way == "merge":
            removed = self._merge_root({}, self.ownership.owned, dict(self.in_place))
            self.restored |= set(removed.restored)
            self.in_place = {}
        elif self.old_way == "drop-in":
            self.texts.set(self.old_target, None, "drop-in")
            if record is not None and record.import_added is not None:
                text = self.texts.get(root) or ""
                text = without_import(text, record.import_added, record.line_added)
                self.texts.set(root, text, "config")
        elif record is not None:
            old = self.texts.get(self.old_target)
            after = template_with(old, {}, record.version, self.ownership.owned, record.created)
            self.texts.set(self.old_target, after, "template")
        for handler in list(self.adopted_from):
            self._give_back(handler)

    def _give_back(self, handler: str) -> None:
        """A table adopted out of another file, written back there."""
        table = self.ownership.adopted.get(handler)
        written = self.adopted_from.pop(handler)
        local = next((f.local for f in self.node.order.files if f.written == written), None)
        local = local or self._local_of(written)
        text = self.texts.get(local) if local is not None else None
        if table is None or local is None or text is None:
            return  # the file is gone: nothing to give back to
        back = merge_config(text, {}, {}, {}, give_back={handler: table}, parse=tomllib.loads)
        role: Role = "config" if local == self.node.root.local else "import"
        self.texts.set(local, back.text, role)
        self.restored.add(handler)

    def _local_of(self, written: str) -> Path | None:
        for path in self.texts.before:
            if str(path) == written:
                return path
        return None

    # -- conflicts and adoption ------------------------------------------------------------

    def judge(self, desired: Tables) -> dict[str, Mapping[str, Any]]:
        """The desired handlers the agent may write here; the rest are conflicts, or
        adopted out of the file that defines them."""
        for handler in [h for h in self.adopted_from if h not in desired]:
            self._give_back(handler)
            self.released.add(handler)
        foreign = self._foreign()
        wanted: dict[str, Mapping[str, Any]] = {}
        for handler in sorted(desired):
            files = foreign.get(handler, [])
            if not files or handler in self.adopted_from:
                wanted[handler] = desired[handler]
            elif self._adoptable(handler, files):
                self._adopt(handler, files[0])
                wanted[handler] = desired[handler]
            else:
                self.conflicts[handler] = _conflict(handler, files, self.placement.way)
        return wanted

    def _foreign(self) -> dict[str, list[LoadedFile]]:
        """Tables of the desired handlers' names in files that are not the agent's: every
        imported file (the agent's drop-in is not among them), and the root unless the
        agent merges there (the merge judges the root's tables itself)."""
        found = handlers_by_file(self.node.order.imported)
        way, root = self.placement.way, self.node.root
        if way in ("drop-in", "template"):
            text = self.texts.get(root.local) or ""
            document = self.settings.parse(text)
            ours = agent_handlers(text, self.owned) if way == "template" else set()
            file = LoadedFile(root.written, root.local, text, document)
            for handler in defined_handlers(document):
                if handler not in ours:
                    found.setdefault(handler, []).insert(0, file)
        return found

    def _adoptable(self, handler: str, files: list[LoadedFile]) -> bool:
        return (
            handler in self.settings.adopt
            and len(files) == 1
            and self.placement.way != "template"
            and self.texts.get(files[0].local) is not None
        )

    def _adopt(self, handler: str, source: LoadedFile) -> None:
        """Take the hand-written table out of its file (kept in the state, written back
        when the agent lets go)."""
        text = self.texts.get(source.local) or source.text
        taken = merge_config(text, {}, {handler: "adopting"}, {}, parse=tomllib.loads)
        role: Role = "config" if source.local == self.node.root.local else "import"
        self.texts.set(source.local, taken.text, role)
        self.adopted[handler] = defined_handlers(source.document)[handler]
        self.adopted_from[handler] = source.written

    # -- the new place ---------------------------------------------------------------------

    def write(self, wanted: Tables) -> MergeResult:
        way = self.placement.way
        if way == "merge":
            return self._merge_root(wanted, self.owned, self.in_place)
        if way == "drop-in":
            return self._drop_in(wanted)
        if way == "template":
            return self._template(wanted)
        return self._bookkeeping({}, {}, root_version=self._root_version())

    def _merge_root(
        self, wanted: Tables, owned: Mapping[str, str], adopted: Mapping[str, Mapping[str, Any]]
    ) -> MergeResult:
        root = self.node.root.local
        settings = self.settings
        merged = merge_config(
            self.texts.get(root) or "",
            wanted,
            owned,
            settings.builtins,
            self.node.pristine.get(root),
            fallback_version=settings.fallback_version,
            adopt=settings.adopt if wanted else (),
            adopted=adopted,
            parse=settings.parse,
        )
        self.texts.set(root, merged.text, "config")
        return merged

    def _drop_in(self, wanted: Tables) -> MergeResult:
        target = self.placement.target
        assert target is not None
        before = self.texts.get(target)
        if before is not None and not is_agents(before):
            raise ConfigError(
                f"{target} exists and was not written by wcow-agent: the agent does not "
                "write over it (rename or remove it)"
            )
        self.texts.set(target, render_drop_in(wanted, self.placement.version), "drop-in")
        self._import(bool(wanted))
        return self._bookkeeping(drop_in_tables(before), wanted, self._root_version())

    def _import(self, needed: bool) -> None:
        """The root imports the drop-in folder: the entry added once (and remembered), or
        taken out with the last handler."""
        root, entry = self.node.root.local, self.placement.import_entry
        text = self.texts.get(root) or ""
        document = self.settings.parse(text)
        if needed and entry is not None and entry not in declared_imports(document):
            self.line_added = "imports" not in document
            self.texts.set(root, with_import(text, entry), "config")
            self.import_added = entry
        elif not needed and self.import_added is not None:
            self.texts.set(root, without_import(text, self.import_added, self.line_added), "config")
            self.import_added, self.line_added = None, False

    def _template(self, wanted: Tables) -> MergeResult:
        target, record = self.placement.target, self.ownership.record
        assert target is not None
        before = self.texts.get(target)
        created = before is None or (record is not None and not self.moving and record.created)
        self.created_target = created
        after = template_with(before, wanted, self.placement.version, self.owned, created)
        self.texts.set(target, after, "template")
        rendered = self.texts.get(self.node.root.local) or ""
        ours = agent_handlers(rendered, self.owned)
        self.rendered = merge_config(
            rendered, wanted, dict.fromkeys(ours, "ours"), {}, parse=self.settings.parse
        ).text
        tables = agent_tables(before, self.owned) if before is not None else {}
        return self._bookkeeping(tables, wanted, self._root_version())

    def _root_version(self) -> int:
        document = self.settings.parse(self.texts.get(self.node.root.local) or "")
        return root_schema(document) or self.settings.fallback_version or 0

    def _bookkeeping(self, before: Tables, wanted: Tables, root_version: int) -> MergeResult:
        """What a drop-in or template change does to the handlers, as a merge reports it."""
        return MergeResult(
            text="",
            version=root_version,
            added=sorted(h for h in wanted if h not in before),
            updated=sorted(h for h in wanted if h in before and dict(before[h]) != dict(wanted[h])),
            removed=sorted(h for h in before if h not in wanted),
            owned={h: table_hash(t) for h, t in wanted.items()},
        )

    # -- the end ---------------------------------------------------------------------------

    def restore_pristine(self, result: MergeResult) -> None:
        """A file that holds nothing of the agent's any more, and means what it meant before
        the agent's first change, is given back byte for byte."""
        root = self.node.root.local
        ours_in_root = self.placement.way == "merge" and bool(result.owned)
        for path, pristine in self.node.pristine.items():
            now = self.texts.get(path)
            if now is None or now == pristine or path not in self.texts.roles:
                continue
            if path == root and (ours_in_root or self.import_added is not None):
                continue
            if any(self._local_of(w) == path for w in self.adopted_from.values()):
                continue
            if _same_meaning(now, pristine):
                self.texts.set(path, pristine, self.texts.roles[path])

    def holders(
        self, record: PlacementRecord | None, owned: Mapping[str, str], adopted: Mapping[str, str]
    ) -> frozenset[Path]:
        """The files holding something of the agent's, by a record and its ownership."""
        root = self.node.root.local
        found = {p for w in adopted.values() if (p := self._local_of(w) or self._loaded(w))}
        if record is None:
            return frozenset(found | ({root} if owned else set()))
        if (record.way == "merge" and owned) or record.import_added is not None:
            found.add(root)
        if record.way != "merge":
            found.add(Path(record.target))
        return frozenset(found)

    def _loaded(self, written: str) -> Path | None:
        return next((f.local for f in self.node.order.files if f.written == written), None)

    def folders(self, after: PlacementRecord | None) -> tuple[Path, ...]:
        record = self.ownership.record
        if record is None or record.way != "drop-in" or not record.folder_created:
            return ()
        if after is not None and after.target == record.target:
            return ()
        return (Path(record.target).parent,)

    def record(self, result: MergeResult) -> PlacementRecord | None:
        way, target = self.placement.way, self.placement.target
        if way is None or target is None or not result.owned:
            return None
        created = way == "drop-in" or (way == "template" and self.created_target)
        folder_created = False
        record = self.ownership.record
        if way == "drop-in":
            folder_created = (
                record.folder_created
                if record is not None and not self.moving
                else self.node.folder_missing
            )
        return PlacementRecord(
            way,
            str(target),
            self.placement.version,
            self.import_added,
            self.line_added,
            created,
            folder_created,
        )


def _same_meaning(a: str, b: str) -> bool:
    try:
        return tomllib.loads(a) == tomllib.loads(b)
    except tomllib.TOMLDecodeError:
        return False


def _conflict(handler: str, files: list[LoadedFile], way: str | None) -> str:
    where = ", ".join(f.written for f in files)
    how = (
        "remove or rename that table"
        if way == "template"
        else "remove that table, rename the profile's handler, or let the agent take it over "
        "with --adopt-handlers"
    )
    return (
        f"containerd already loads a runtime {handler!r} that wcow-agent did not write, "
        f"from {where}; it is left alone ({how})"
    )
