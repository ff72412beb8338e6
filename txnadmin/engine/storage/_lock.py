"""The engine directory's writer lock: one writer (exclusive flock) or any number of read-only views that keep
writers out while they look (shared flock). The writer records its pid in the file so a refusal can name it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Optional

from ._errors import EngineLockedError, StorageError

LOCK_NAME = "storage.lock"


def _flock_or_raise(fd: int, directory: Path, mode: int, refusal: str) -> None:
    """Take the lock without waiting; when someone holds it, close ``fd`` and name the holder in the error."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise EngineLockedError(f"{directory}: {refusal.format(holder=holder)}", holder) from None


def take_writer_lock(directory: Path) -> int:
    """The exclusive lock a writing engine holds for its lifetime; its descriptor (closing it releases the lock)."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    _flock_or_raise(fd, directory, fcntl.LOCK_EX, "already open for writing by process {holder}; stop it or open "
                                                  "read-only")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def hold_off_writers(directory: Path) -> Optional[int]:
    """A shared lock for a read-only view: no writer can start (and change what is being judged) while it is held,
    and a writer already running is refused (EngineLockedError naming its pid), never read mid-write. None when no
    writer ever opened the directory (there is nothing one could be changing)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{directory}: cannot read {LOCK_NAME} ({exc.strerror})") from None
    _flock_or_raise(fd, directory, fcntl.LOCK_SH, "open for writing by process {holder}")
    return fd
