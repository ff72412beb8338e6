"""What a broker older than PIP-160 (before Pulsar 2.11) does with a batched entry: it cannot read it.

Pulsar 2.10 parses every entry of a transaction log or a pending-ack log as one plain record. A batched entry
starts with ``0E 01``, which is no valid protobuf tag (wire type 6), so the parse throws and the replay stops
there: the coordinator's store never becomes ready (its admin stats answer 404, its clients are refused), and the
subscription's pending-ack handle never leaves Initializing. Only the replayed part of a log is read (after its
cursor's mark-delete, in ledgers not yet trimmed), so a batched entry the log already left behind does no harm.
The engine reproduces that on every component it opens on a broker claiming such a version.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from ..codec.entry import DecodedEntry
from .position import Position

log = logging.getLogger(__name__)
T = TypeVar("T")


class BatchedEntryUnreadable(Exception):
    """A replay on a broker without PIP-160's reader met a batched entry: the log, the entry and the version."""

    def __init__(self, log_name: str, position: Position, version: str):
        self.log_name = log_name
        self.ledger_id = position.ledger_id
        self.entry_id = position.entry_id
        self.version = version
        super().__init__(f"{log_name}: entry {position.ledger_id}:{position.entry_id} is a batched entry (PIP-160), "
                         f"which a broker of version {version} cannot read; the replay stopped there")


def refuse_batched(decoded: DecodedEntry, log_name: str, position: Position, older: str | None) -> None:
    """Raise :class:`BatchedEntryUnreadable` when ``older`` (the replaying broker's version, None when it has
    PIP-160's reader) meets a batched entry."""
    if older is not None and decoded.batched:
        raise BatchedEntryUnreadable(log_name, position, older)


def replayed(key: str, what: str, replay: Callable[[], T], failures: dict[str, BatchedEntryUnreadable],
             otherwise: T) -> T:
    """Run a component's ``replay``; a BatchedEntryUnreadable is logged (naming ``what``, the log and the entry,
    as the broker's log would) and kept in ``failures`` under ``key`` (an earlier one of that key is forgotten
    first: the log opened again), and ``otherwise`` is returned: the component stays open, never ready."""
    failures.pop(key, None)
    try:
        return replay()
    except BatchedEntryUnreadable as failure:
        log.error("%s did not recover: %s", what, failure)
        failures[key] = failure
        return otherwise
