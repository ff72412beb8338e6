"""Keyed, compacted logs on managed ledgers: the engine's version of Pulsar's compacted system topics.

Two flavours, because the transaction-buffer snapshot topics need both:

* :class:`KeyedLog` keeps the latest value per key in memory (a table view). It reads the log
  incrementally — ``catch_up()`` reads only what was appended since the last read — and counts the
  entries it read, so a reader shared by many topics can be shown to read the log once. Compaction
  rewrites the live values after a rollover and drops everything before them.
* :class:`PositionedLog` keeps values on disk and answers reads *by position*, the way Pulsar reads
  a snapshot segment from the message id stored in its index. Positions never change: instead of
  rewriting, a superseded or tombstoned entry is individually deleted on the log's cursor, so a
  ledger whose entries are all dead falls behind the mark-delete and is trimmed.

Entry layout (both): ``{"key": …, "value": …}`` as compact JSON; ``value`` null is a tombstone.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator, Optional

from .managed_ledger import ManagedLedgerFactory
from .position import Position

CURSOR = "__compaction"


def encode_record(key: str, value: Any) -> bytes:
    return json.dumps({"key": key, "value": value}, separators=(",", ":")).encode()


def decode_record(payload: bytes) -> tuple[str, Any]:
    item = json.loads(payload)
    return item["key"], item.get("value")


class KeyedLog:
    """Latest value per key. ``lazy=True`` defers reading the log until the first ``catch_up``/``get``.

    The table keeps each live key's position. With ``retain_values`` (the default) it also keeps every value;
    without, it keeps only values read for keys nobody has :meth:`take`-n yet — a snapshot view shared by a
    namespace's topics then holds each topic's snapshot only until that topic has recovered from it, not for
    as long as the engine runs. A value not in memory is read back by position.
    """

    def __init__(self, factory: ManagedLedgerFactory, name: str, ml_config=None, compact_every: int = 1000,
                 lazy: bool = False, retain_values: bool = True):
        self.name = name
        self.ledger = factory.open(name, ml_config)
        self.cursor = self.ledger.open_cursor(CURSOR)
        self.compact_every = compact_every
        self.retain_values = retain_values
        self._lock = threading.RLock()
        self._positions: dict[str, Position] = {}
        self._values: dict[str, Any] = {}
        self._since_compaction = 0
        self._read_through: Position = self.cursor.mark_delete_position
        self.entries_read = 0
        self.bytes_written = 0  # by put (compaction rewrites not counted)
        if not lazy:
            self.catch_up()

    def _caught_up(self) -> bool:
        return self._read_through >= self.ledger.last_confirmed_entry

    def _apply(self, key: str, value: Any, pos: Position, keep_value: bool) -> None:
        if value is None:
            self._positions.pop(key, None)
            self._values.pop(key, None)
            return
        self._positions[key] = pos
        if keep_value:
            self._values[key] = value
        else:
            self._values.pop(key, None)

    def catch_up(self) -> int:
        """Apply every entry appended since the last read; returns how many were read."""
        with self._lock:
            read = 0
            for pos, payload in self.ledger.entries_after(self._read_through, 500):
                key, value = decode_record(payload)
                self._apply(key, value, pos, keep_value=True)
                self._read_through = pos
                read += 1
            self.entries_read += read
            return read

    def _value(self, key: str) -> Optional[Any]:
        if key in self._values:
            return self._values[key]
        pos = self._positions.get(key)
        if pos is None:
            return None
        self.entries_read += 1
        return decode_record(self.ledger.read_entry(pos))[1]

    def get(self, key: str) -> Optional[Any]:
        """The latest value (reads whatever is new first, like Pulsar's ``TableView.readLatest``)."""
        with self._lock:
            self.catch_up()
            return self._value(key)

    def take(self, key: str) -> Optional[Any]:
        """Like :meth:`get`, then (without ``retain_values``) let the value go from memory."""
        with self._lock:
            value = self.get(key)
            if not self.retain_values:
                self._values.pop(key, None)
            return value

    def contains(self, key: str) -> bool:
        with self._lock:
            self.catch_up()
            return key in self._positions

    def items(self) -> Iterator[tuple[str, Any]]:
        with self._lock:
            self.catch_up()
            return iter([(key, self._value(key)) for key in list(self._positions)])

    def keys(self) -> list[str]:
        with self._lock:
            self.catch_up()
            return list(self._positions)

    def put(self, key: str, value: Any) -> Position:
        """Durable on return; ``None`` deletes the key (a tombstone)."""
        payload = encode_record(key, value)
        with self._lock:
            caught_up = self._caught_up()
            pos = self.ledger.add_entry(payload)
            self.bytes_written += len(payload)
            if caught_up:
                # Our own write is the next entry: apply it instead of reading it back. The writer has the
                # value already, so without retain_values only its position is kept.
                self._read_through = pos
                self._apply(key, value, pos, keep_value=self.retain_values)
            self._since_compaction += 1
            if self.compact_every and self._since_compaction >= self.compact_every:
                self.compact()
            return pos

    def compact(self) -> None:
        """Rewrite the live entries after a rollover and drop everything written before them."""
        with self._lock:
            self.catch_up()
            last_old = self.ledger.last_confirmed_entry
            self.ledger.rollover()
            for key, old in list(self._positions.items()):
                payload = self.ledger.read_entry(old)  # the entry as written: copied, not re-encoded
                self._positions[key] = self._read_through = self.ledger.add_entry(payload)
            if last_old is not None and last_old.entry_id >= 0 and last_old > self.cursor.mark_delete_position:
                self.cursor.mark_delete(last_old)
            self.ledger.trim()
            self._since_compaction = 0

    def close(self) -> None:
        self.ledger.close()


def scan_latest(log: KeyedLog, key: str) -> tuple[Optional[Any], int]:
    """A private reader: read the whole log for one key (what every topic did before readers were shared).

    Returns (latest value or None, entries read). It reads the ledger directly and leaves the
    log's own table alone.
    """
    value, read = None, 0
    for _, payload in log.ledger.entries_after(log.cursor.mark_delete_position, 500):
        read += 1
        k, v = decode_record(payload)
        if k == key:
            value = v
    return value, read


class PositionedLog:
    """Values read by position; dead entries are individually deleted so whole dead ledgers trim.

    ``key → position`` of every live key is kept in memory (keys only, no values). It is built on
    first need by reading the log once (the engine's compactor read).
    """

    def __init__(self, factory: ManagedLedgerFactory, name: str, ml_config=None):
        self.name = name
        self.ledger = factory.open(name, ml_config)
        self.cursor = self.ledger.open_cursor(CURSOR)
        self._lock = threading.RLock()
        self._positions: Optional[dict[str, Position]] = None
        self.bytes_written = 0

    def _index(self) -> dict[str, Position]:
        if self._positions is None:
            positions: dict[str, Position] = {}
            for pos, payload in self.ledger.entries_after(self.cursor.mark_delete_position, 200):
                if self.cursor.is_deleted(pos):
                    continue
                key, value = decode_record(payload)
                if value is None:
                    positions.pop(key, None)
                else:
                    positions[key] = pos
            self._positions = positions
        return self._positions

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._index())

    def put(self, key: str, value: Any) -> Position:
        """Append ``value`` under ``key`` (None = tombstone); the entry it replaces becomes dead."""
        payload = encode_record(key, value)
        with self._lock:
            index = self._index()
            pos = self.ledger.add_entry(payload)
            self.bytes_written += len(payload)
            dead = [pos] if value is None else []  # a tombstone has nothing left to delete once applied
            old = index.pop(key, None)
            if old is not None:
                dead.append(old)
            if value is not None:
                index[key] = pos
            self.cursor.delete_many([(p, None) for p in dead])
            return pos

    def read(self, pos: Position) -> tuple[str, Any]:
        """The record at ``pos``; KeyError if its ledger is gone or the entry was deleted."""
        if self.cursor.is_deleted(pos):
            raise KeyError(f"{self.name}: entry {pos} was deleted")
        try:
            payload = self.ledger.read_entry(pos)
        except Exception as exc:  # noqa: BLE001 — re-raised as the KeyError this method documents, cause named
            raise KeyError(f"{self.name}: cannot read entry {pos}: {exc}") from None
        return decode_record(payload)

    def close(self) -> None:
        self.ledger.close()
