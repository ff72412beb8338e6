"""Ledger storage of the embedded engine: a bookie (entry logs) plus a small ZooKeeper (SQLite metadata).

See docs/engine-storage.md for the on-disk layout, the durability strategy and the multi-process rules.
"""

from __future__ import annotations

from . import entrylog
from ._errors import (
    EngineLockedError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerNotFoundError,
    StorageCorruptError,
    StorageError,
    StorageReadOnlyError,
)
from ._lock import LOCK_NAME, hold_off_writers
from ._metadata import BOOKIE_ADDRESS, LedgerMetadata
from ._storage import DB_NAME, LEDGERS_DIR, LedgerStorage

__all__ = [
    "BOOKIE_ADDRESS",
    "DB_NAME",
    "EngineLockedError",
    "EntryNotFoundError",
    "LEDGERS_DIR",
    "LOCK_NAME",
    "hold_off_writers",
    "LedgerClosedError",
    "LedgerMetadata",
    "LedgerNotFoundError",
    "LedgerStorage",
    "StorageCorruptError",
    "StorageError",
    "StorageReadOnlyError",
    "entrylog",
]
