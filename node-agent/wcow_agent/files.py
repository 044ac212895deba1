"""Reading and writing config.toml the way containerd needs it."""

from __future__ import annotations

import codecs
import os
import shutil
import tempfile
from pathlib import Path

BACKUP_SUFFIX = ".wcow-backup"


def read_config(path: Path) -> str:
    """The file's text. PowerShell's UTF-16 and a UTF-8 BOM are read (and later written
    back as plain UTF-8, which is all containerd can parse)."""
    raw = path.read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return raw.decode("utf-16")
    return raw.decode("utf-8-sig")


def write_atomically(path: Path, text: str, backup: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8, no BOM): a temp file in the same folder,
    flushed to disk, then renamed over the original; the old file is kept as a backup."""
    data = text.encode("utf-8")
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        if backup and path.exists():
            backup_temp = path.with_name(f".{path.name}{BACKUP_SUFFIX}.tmp")
            shutil.copy2(path, backup_temp)
            os.replace(backup_temp, path.with_name(path.name + BACKUP_SUFFIX))
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
