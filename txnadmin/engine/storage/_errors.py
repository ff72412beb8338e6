"""Errors raised by the ledger storage; every message is one line naming what is wrong."""

from __future__ import annotations


class StorageError(Exception):
    """Base class: the storage cannot do what was asked."""


class EngineLockedError(StorageError):
    """Another process holds the directory for writing; ``holder`` is its pid as it recorded it, when known."""

    def __init__(self, message: str, holder: "str | None" = None):
        super().__init__(message)
        self.holder = holder


class LedgerNotFoundError(StorageError):
    """The ledger does not exist (never created, or deleted)."""


class EntryNotFoundError(StorageError):
    """The ledger exists but has no durable entry with that id."""


class LedgerClosedError(StorageError):
    """The ledger is closed (or being closed or deleted) and takes no more entries."""


class StorageReadOnlyError(StorageError):
    """The storage was opened read-only and refuses writes."""


class StorageCorruptError(StorageError):
    """Bytes on disk do not match their checksum or the index."""
