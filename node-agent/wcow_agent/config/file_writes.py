"""A change's files written together, and put back together (``cycle/transaction.py``).

Each file is replaced atomically (``files.write_atomically``) with the previous one kept as
``<name>.wcow-backup``; a file the change deletes is kept the same way first, so that a
recovery after a crash can put every file back from its backup (``Undo``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from wcow_agent.config.file_set import FileEdit
from wcow_agent.config.files import BACKUP_SUFFIX, write_atomically
from wcow_agent.config.state import PRISTINE_SUFFIX, beside


def write_edits(edits: Iterable[FileEdit]) -> None:
    for edit in edits:
        if edit.after is None:
            if edit.path.exists():
                backup = beside(edit.path, BACKUP_SUFFIX)
                shutil.copy2(edit.path, beside(edit.path, BACKUP_SUFFIX + ".tmp"))
                os.replace(beside(edit.path, BACKUP_SUFFIX + ".tmp"), backup)
                edit.path.unlink()
            continue
        edit.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(edit.path, edit.after, backup=edit.before is not None)


def restore_edits(edits: Iterable[FileEdit]) -> None:
    """Every file as it was before the change (from memory)."""
    for edit in edits:
        if edit.before is None:
            edit.path.unlink(missing_ok=True)
        else:
            edit.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(edit.path, edit.before, backup=False)


def restore_backups(files: Mapping[str, bool]) -> None:
    """After a crash: every file a change wrote put back from its backup (``True``: it
    existed before), or deleted (``False``: the change created it)."""
    for name, existed in files.items():
        path = Path(name)
        backup = beside(path, BACKUP_SUFFIX)
        if existed and backup.exists():
            shutil.copy2(backup, beside(path, ".wcow-restore.tmp"))
            os.replace(beside(path, ".wcow-restore.tmp"), path)
        elif not existed:
            path.unlink(missing_ok=True)


def keep_pristine(edits: Iterable[FileEdit], held_before: Iterable[Path]) -> None:
    """Before the agent first changes a file of someone else's: the file as it was
    (``.wcow-original``), what a removal gives back byte for byte."""
    held = set(held_before)
    for edit in edits:
        pristine = beside(edit.path, PRISTINE_SUFFIX)
        if edit.role == "drop-in" or edit.before is None or edit.path in held:
            continue
        if not pristine.exists():
            write_atomically(pristine, edit.before, backup=False)


def drop_leftovers(
    vacated: Iterable[Path], deleted: Iterable[Path] = (), folders: Iterable[Path] = ()
) -> list[Path]:
    """The originals of files the agent no longer holds anything in; the original and
    backup of files it deleted (its drop-in: nothing may be left in the folder containerd
    reads); folders it created that are left empty."""
    removed = []
    wanted = [(p, PRISTINE_SUFFIX) for p in vacated]
    wanted += [(p, s) for p in deleted for s in (PRISTINE_SUFFIX, BACKUP_SUFFIX)]
    for path, suffix in wanted:
        leftover = beside(path, suffix)
        if leftover.exists():
            leftover.unlink()
            removed.append(leftover)
    for folder in folders:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            removed.append(folder)
    return removed
