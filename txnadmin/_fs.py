"""Atomic file writes: every state file goes to a temporary file, is fsync'd, then renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional


def atomic_write_text(path: Path, text: str, mode: Optional[int] = None) -> None:
    """Readers see the old file or the new one, never half of either; ``mode`` e.g. 0o600 for secrets."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
