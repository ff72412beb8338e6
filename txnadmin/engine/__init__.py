"""The embedded engine: Pulsar's transaction storage, faithfully, in one local directory."""

from __future__ import annotations

import os
from pathlib import Path

ENGINE_DIR_ENV = "TXNADMIN_ENGINE_DIR"


def default_engine_dir() -> Path:
    """Where the embedded engine lives when no target is given: $TXNADMIN_ENGINE_DIR or ~/.txnadmin/engine."""
    env = os.environ.get(ENGINE_DIR_ENV)
    return Path(env) if env else Path.home() / ".txnadmin" / "engine"


__all__ = ["ENGINE_DIR_ENV", "default_engine_dir"]
