"""Reading and writing config.toml the way containerd needs it."""

from __future__ import annotations

import codecs
import errno
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from wcow_agent.host.filesecurity import platform_file_security
from wcow_agent.host.interfaces import FileSecurity

BACKUP_SUFFIX = ".wcow-backup"


def read_config(path: Path) -> str:
    """The file's text. PowerShell's UTF-16 and a UTF-8 BOM are read (and later written
    back as plain UTF-8, which is all containerd can parse)."""
    raw = path.read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return raw.decode("utf-16")
    return raw.decode("utf-8-sig")


def write_target(path: Path) -> Path:
    """The file a write to ``path`` replaces: through a symbolic link, its target (the link
    stays a link). A link to nothing is refused rather than its target created."""
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not target.is_file():
        raise FileNotFoundError(
            errno.ENOENT,
            f"{path} is a symbolic link to {target}, which is not a file; wcow-agent writes "
            "through links but does not create their targets",
            str(path),
        )
    return target


def write_atomically(
    path: Path, text: str, backup: bool = True, security: FileSecurity | None = None
) -> None:
    """Replace ``path`` with ``text`` (UTF-8, no BOM): a temp file in the same folder,
    flushed to disk, given the old file's access control (mode and owner; owner, group and
    DACL on Windows), then renamed over the original; the old file is kept as a backup
    beside ``path``. Through a symbolic link the link's target is replaced."""
    target = write_target(path)
    data = text.encode("utf-8")
    handle, temp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        if target.exists():
            (security or platform_file_security()).copy(target, Path(temp_name))
            if backup:
                backup_temp = path.with_name(f".{path.name}{BACKUP_SUFFIX}.tmp")
                shutil.copy2(target, backup_temp)
                os.replace(backup_temp, path.with_name(path.name + BACKUP_SUFFIX))
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def sweep_temp_files(path: Path) -> list[Path]:
    """Remove temp files a killed agent left beside ``path`` (they never replaced it), and
    beside its target when it is a symbolic link."""
    removed = []
    folders = {path.parent: path.name}
    if path.is_symlink():
        resolved = Path(os.path.realpath(path))
        folders[resolved.parent] = resolved.name
    for folder, name in folders.items():
        for leftover in folder.glob(f".{name}.*.tmp"):
            leftover.unlink(missing_ok=True)
            removed.append(leftover)
    return removed


class LockedError(RuntimeError):
    pass


class FileLock:
    """One wcow-agent per config.toml: ``run``, ``uninstall`` and ``merge --write`` take
    this lock so that they never interleave writes and restarts. The OS drops it when the
    process dies, so a killed agent never leaves a stale lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: int | None = None

    def acquire(self) -> None:
        handle = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if sys.platform == "win32":  # pragma: no cover - Windows only
                msvcrt = importlib.import_module("msvcrt")
                msvcrt.locking(handle, msvcrt.LK_NBLCK, 1)
            else:
                fcntl = importlib.import_module("fcntl")
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                owner = os.read(handle, 64).decode("ascii", "replace").strip()
            except OSError:  # Windows refuses reads of a locked region
                owner = ""
            os.close(handle)
            raise LockedError(
                f"another wcow-agent (pid {owner or 'unknown'}) is working on this config.toml "
                f"(lock {self.path}); stop it first"
            ) from None
        os.ftruncate(handle, 0)
        os.write(handle, str(os.getpid()).encode("ascii"))
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
