"""Managed ledgers (Pulsar's ManagedLedgerImpl): a named log made of storage ledgers.

Ledgers roll over on max entries / size / age (after the minimum age), cursors track consumers,
and closed ledgers wholly before the slowest cursor's mark-delete are trimmed. The open ledger is
never trimmed. The ledger list and properties live in the storage's metadata store under
``managed-ledgers/<name>``; cursors under ``managed-ledgers/<name>/cursors/<cursor>``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Optional

from .completion import Completion
from .cursor import ManagedCursor, dumps_state
from .position import Position
from .storage import LedgerNotFoundError, LedgerStorage

ROOT = "managed-ledgers/"


def _wall_ms() -> float:
    return time.time() * 1000


@dataclass
class ManagedLedgerConfig:
    max_entries_per_ledger: int = 50000  # managedLedgerMaxEntriesPerLedger
    min_ledger_rollover_time_ms: float = 10 * 60_000  # managedLedgerMinLedgerRolloverTimeMinutes
    max_ledger_rollover_time_ms: float = 240 * 60_000  # managedLedgerMaxLedgerRolloverTimeMinutes
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024  # managedLedgerMaxSizePerLedgerMbytes
    deletion_at_batch_index_level_enabled: bool = True  # acknowledgmentAtBatchIndexLevelEnabled
    retention_time_ms: float = 0  # defaultRetentionTimeInMinutes; -1 keeps consumed ledgers forever
    retention_size_bytes: int = 0  # defaultRetentionSizeInMB; -1 means no size limit
    clock: Callable[[], float] = field(default=_wall_ms)


@dataclass
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int

    def to_json(self) -> dict:
        return {"ledgerId": self.ledger_id, "entries": self.entries, "size": self.size, "timestamp": self.timestamp_ms}


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone().isoformat(timespec="milliseconds")


class EntryCache:
    """Recently added entries of every managed ledger of a factory (Pulsar's managed-ledger entry cache).

    A consumer tailing a topic reads what was just written; from here that read skips the index lookup, the
    `pread` and the checksum. Bounded in bytes, oldest out first; only entries whose add was acknowledged go in.
    Ledger ids are never reused, so an entry of a trimmed ledger can only go stale, never wrong.
    """

    def __init__(self, max_bytes: int = 8 << 20):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._bytes = 0

    def put(self, ledger_id: int, entry_id: int, payload: bytes) -> None:
        with self._lock:
            key = (ledger_id, entry_id)
            if key in self._entries or len(payload) > self.max_bytes:
                return
            self._entries[key] = payload
            self._bytes += len(payload)
            while self._bytes > self.max_bytes:
                self._bytes -= len(self._entries.popitem(last=False)[1])

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        with self._lock:
            return self._entries.get((ledger_id, entry_id))


class ManagedLedger:
    def __init__(self, factory: "ManagedLedgerFactory", name: str, config: ManagedLedgerConfig,
                 read_only: bool = False):
        self.factory = factory
        self.read_only = read_only
        self.storage: LedgerStorage = factory.storage
        self._cache = factory.entry_cache
        self.name = name
        self.config = config
        self._lock = threading.RLock()
        self._rollover_listeners: list[Callable[["ManagedLedger"], None]] = []
        self._info_interceptors: list[Callable[[dict[str, str]], None]] = []
        self._cursors: dict[str, ManagedCursor] = {}
        self._closed = False
        self.entries_added = 0
        self.state = "LedgerOpened"
        raw = self.storage.meta_get(self._key())
        info = json.loads(raw) if raw else {"ledgers": [], "properties": {}}
        self._properties: dict[str, str] = dict(info.get("properties", {}))
        self._ledgers: list[LedgerInfo] = [LedgerInfo(**l) for l in info.get("ledgers", [])]
        if read_only:
            self._observe_last_ledger()
        else:
            self._recover_last_ledger()
        for key in self.storage.meta_list(self._key() + "/cursors/"):
            cname = key.rsplit("/", 1)[1]
            raw = self.storage.meta_get(key)
            if raw is None:  # deleted since listed
                continue
            state = json.loads(raw)
            self._cursors[cname] = ManagedCursor(self, cname, Position(-1, -1), state)
        if not read_only:
            self._start_ledger()

    def _observe_last_ledger(self) -> None:
        """Read-only view from another process: the open ledger's progress comes from storage."""
        if not self._ledgers:
            raise LedgerNotFoundError(f"managed ledger {self.name}: has no ledgers")
        last = self._ledgers[-1]
        try:
            meta = self.storage.ledger_metadata(last.ledger_id)
            last.entries, last.size = meta.entries, meta.length
        except LedgerNotFoundError:
            pass
        self._current_created = last.timestamp_ms
        self._issued = last.entries

    # -- metadata ----------------------------------------------------------------------------
    def _key(self) -> str:
        return ROOT + self.name

    def _persist_info(self) -> None:
        if self.read_only:
            return
        for fn in self._info_interceptors:
            fn(self._properties)  # Pulsar's ManagedLedgerInterceptor.onUpdateManagedLedgerInfo
        info = {"ledgers": [l.__dict__ for l in self._ledgers], "properties": self._properties}
        self.storage.meta_put(self._key(), json.dumps(info, separators=(",", ":")).encode())

    def persist_cursor(self, cursor: ManagedCursor, state: bytes | None = None, version: int | None = None) -> None:
        """Store a cursor's state under this ledger's metadata: a snapshot the cursor took (``state`` and its
        ``version``, committed without waiting for the disk; the version keeps an older snapshot from overwriting a
        newer one), or, without them, the cursor's current state, synced."""
        if self.read_only:
            raise RuntimeError(f"managed ledger {self.name} is open read-only")
        key = f"{self._key()}/cursors/{cursor.name}"
        if state is None:
            self.storage.meta_put(key, dumps_state(cursor))
        else:
            self.storage.meta_put_many({key: state}, {key: version} if version is not None else None, sync=False)

    def _recover_last_ledger(self) -> None:
        """After a restart the last ledger may still be OPEN in storage: close it; drop it if empty."""
        if not self._ledgers:
            return
        last = self._ledgers[-1]
        try:
            meta = self.storage.ledger_metadata(last.ledger_id)
            if meta.state == "OPEN":
                meta = self.storage.close_ledger(last.ledger_id)
            last.entries, last.size = meta.entries, meta.length
        except LedgerNotFoundError:
            last.entries = 0
        if last.entries == 0:
            self._ledgers.pop()
            try:
                self.storage.delete_ledger(last.ledger_id)
            except LedgerNotFoundError:
                pass

    def _start_ledger(self) -> None:
        ledger_id = self.storage.create_ledger({
            "application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": self.name,
        })
        now = int(self.config.clock())
        self._ledgers.append(LedgerInfo(ledger_id, 0, 0, now))
        self._current_created = now
        self._issued = 0  # adds sent to the current ledger
        self._persist_info()

    # -- properties and listeners -------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        with self._lock:
            return dict(self._properties)

    def set_properties(self, updates: dict[str, str]) -> None:
        with self._lock:
            self._properties.update({k: str(v) for k, v in updates.items()})
            self._persist_info()

    def add_rollover_listener(self, fn: Callable[["ManagedLedger"], None]) -> None:
        self._rollover_listeners.append(fn)

    def add_info_interceptor(self, fn: Callable[[dict[str, str]], None]) -> None:
        """``fn(properties)`` may update the properties each time the ledger list is written (rollover, trim,
        close), as Pulsar's ``ManagedLedgerInterceptor.onUpdateManagedLedgerInfo`` does."""
        with self._lock:
            self._info_interceptors.append(fn)

    # -- ledgers -----------------------------------------------------------------------------
    @property
    def current_ledger_id(self) -> int:
        return self._ledgers[-1].ledger_id

    @property
    def first_ledger_id(self) -> int:
        """The oldest live ledger (-1 if none): ledgers below it were trimmed."""
        with self._lock:
            return self._ledgers[0].ledger_id if self._ledgers else -1

    def ledgers(self) -> list[LedgerInfo]:
        with self._lock:
            return [LedgerInfo(**l.__dict__) for l in self._ledgers]

    @property
    def last_confirmed_entry(self) -> Position:
        with self._lock:
            for info in reversed(self._ledgers):
                if info.entries:
                    return Position(info.ledger_id, info.entries - 1)
            return Position(self._ledgers[0].ledger_id, -1) if self._ledgers else Position(-1, -1)

    def next_write_position(self) -> Position:
        with self._lock:
            return Position(self.current_ledger_id, self._ledgers[-1].entries)

    def next_position(self, pos: Position) -> Optional[Position]:
        """The entry after ``pos`` that exists, skipping ledger ends and empty ledgers; None at the end."""
        with self._lock:
            for info in self._ledgers:
                if info.ledger_id < pos.ledger_id:
                    continue
                if info.ledger_id == pos.ledger_id:
                    if pos.entry_id + 1 < info.entries:
                        return Position(info.ledger_id, pos.entry_id + 1)
                    continue
                if info.entries:
                    return Position(info.ledger_id, 0)
            return None

    def entries_between(self, after: Position) -> int:
        with self._lock:
            total = 0
            for info in self._ledgers:
                if info.ledger_id > after.ledger_id:
                    total += info.entries
                elif info.ledger_id == after.ledger_id:
                    total += max(0, info.entries - after.entry_id - 1)
            return total

    def _full(self, now: float) -> bool:
        current = self._ledgers[-1]
        age = now - self._current_created
        if age < self.config.min_ledger_rollover_time_ms:
            return False
        return (self._issued >= self.config.max_entries_per_ledger
                or current.size >= self.config.max_size_per_ledger_bytes
                or (self._issued > 0 and age >= self.config.max_ledger_rollover_time_ms))

    def rollover(self) -> None:
        """Close the current ledger and start a new one (also what a reload does)."""
        with self._lock:
            for fn in self._rollover_listeners:
                fn(self)
            current = self._ledgers[-1]
            meta = self.storage.close_ledger(current.ledger_id)
            current.entries, current.size = meta.entries, meta.length
            if current.entries == 0:  # an empty ledger holds nothing to read: drop it rather than list it
                self._ledgers.pop()
                self.storage.delete_ledger(meta.ledger_id)
            self._start_ledger()

    def maybe_rollover(self) -> bool:
        with self._lock:
            if self._closed or self.read_only or not self._full(self.config.clock()):
                return False
            self.rollover()
            return True

    # -- writing -----------------------------------------------------------------------------
    def add_entry(self, payload: bytes) -> Position:
        done = Completion()
        self.add_entry_async(payload, done)
        return done.result(what=f"managed ledger {self.name}: add")

    def add_entry_async(self, payload: bytes,
                        callback: Callable[[Optional[Position], Optional[BaseException]], None]) -> Optional[Position]:
        """Queue an add (pipelined: many may be pending, they complete and call back in order).

        Returns the position the entry will have, or None when it is refused (the callback then says why).
        """
        with self._lock:
            if self._closed:
                callback(None, RuntimeError(f"managed ledger {self.name} is closed"))
                return None
            if self._full(self.config.clock()):
                self.rollover()
            info = self._ledgers[-1]
            self._issued += 1
            ledger_id = info.ledger_id
            payload = payload if isinstance(payload, bytes) else bytes(payload)  # cached as given: immutable
            size = len(payload)

            def done(entry_id, exc):
                if exc is None:
                    self._cache.put(ledger_id, entry_id, payload)  # before anyone can know the entry is there
                    with self._lock:
                        if entry_id + 1 > info.entries:  # a close may already have counted it
                            info.entries = entry_id + 1
                            info.size += size
                        self.entries_added += 1
                    callback(Position(ledger_id, entry_id), None)
                else:
                    callback(None, exc)

            entry_id = self.storage.add_entry_async(ledger_id, payload, done)
            return None if entry_id is None else Position(ledger_id, entry_id)

    # -- reading -----------------------------------------------------------------------------
    def read_entry(self, pos: Position) -> bytes:
        return self.storage.read_entry(pos.ledger_id, pos.entry_id)

    def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` confirmed entries from ``start`` on, crossing into later ledgers."""
        out: list[tuple[Position, bytes]] = []
        with self._lock:
            spans = [(l.ledger_id, l.entries) for l in self._ledgers if l.ledger_id >= start.ledger_id]
        for ledger_id, entries in spans:
            first = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
            if first >= entries:
                continue
            last = min(entries - 1, first + max_entries - len(out) - 1)
            while first <= last:  # the tail a consumer just missed is usually still cached
                cached = self._cache.get(ledger_id, first)
                if cached is None:
                    break
                out.append((Position(ledger_id, first), cached))
                first += 1
            if first <= last:
                for offset, data in enumerate(self.storage.read_entries(ledger_id, first, last)):
                    out.append((Position(ledger_id, first + offset), data))
            if len(out) >= max_entries:
                break
        return out

    def entries_after(self, position: Position, batch: int = 200) -> Iterator[tuple[Position, bytes]]:
        """Every confirmed entry after ``position`` (e.g. a cursor's mark-delete), read ``batch`` at a time."""
        next_pos = Position(position.ledger_id, position.entry_id + 1)
        while True:
            chunk = self.read_entries(next_pos, batch)
            if not chunk:
                return
            yield from chunk
            last = chunk[-1][0]
            next_pos = Position(last.ledger_id, last.entry_id + 1)

    # -- cursors and trimming ---------------------------------------------------------------
    def open_cursor(self, name: str) -> ManagedCursor:
        with self._lock:
            cursor = self._cursors.get(name)
            if cursor is None:
                # A new cursor starts at the end, as in Pulsar.
                cursor = ManagedCursor(self, name, self.last_confirmed_entry)
                self._cursors[name] = cursor
                self.persist_cursor(cursor)
            return cursor

    def cursors(self) -> dict[str, ManagedCursor]:
        with self._lock:
            return dict(self._cursors)

    def cursor_named(self, name: str) -> Optional[ManagedCursor]:
        """One cursor, or None; without copying every cursor as ``cursors()`` does (the sweep asks once per store)."""
        with self._lock:
            return self._cursors.get(name)

    def flush_cursors(self) -> None:
        """Persist what cursors changed lazily (Pulsar persists mark-deletes about once a second)."""
        if self.read_only:
            return
        for cursor in self.cursors().values():
            cursor.flush()

    def delete_cursor(self, name: str) -> None:
        with self._lock:
            if self._cursors.pop(name, None) is not None:
                self.storage.meta_delete(f"{self._key()}/cursors/{name}")

    def trim(self) -> list[int]:
        """Delete closed ledgers wholly before the slowest cursor's mark-delete; never the open ledger."""
        with self._lock:
            if self._closed or self.read_only:
                return []  # a reopened instance owns the metadata now
            if self._cursors:
                slowest = min(c.mark_delete_position for c in self._cursors.values())
            else:
                slowest = self.last_confirmed_entry
            deleted = []
            now = self.config.clock()
            total_size = sum(l.size for l in self._ledgers)
            size_to_delete = 0
            while len(self._ledgers) > 1:
                first = self._ledgers[0]
                wholly_before = first.ledger_id < slowest.ledger_id or (
                    first.ledger_id == slowest.ledger_id and slowest.entry_id >= first.entries - 1
                )
                if not wholly_before or self._retained(first, total_size - size_to_delete, now):
                    break
                size_to_delete += first.size
                self._ledgers.pop(0)
                deleted.append(first.ledger_id)
            if deleted:
                self._persist_info()
                for ledger_id in deleted:
                    try:
                        self.storage.delete_ledger(ledger_id)
                    except LedgerNotFoundError:
                        pass
            return deleted

    def _retained(self, info: LedgerInfo, remaining_size: int, now: float) -> bool:
        """Pulsar keeps a consumed ledger unless it is past the retention time or the log is over the size quota."""
        cfg = self.config
        if cfg.retention_time_ms == 0 and cfg.retention_size_bytes == 0:
            return False  # no retention: even a same-millisecond or empty-payload ledger goes once consumed
        expired = cfg.retention_time_ms >= 0 and now - info.timestamp_ms > cfg.retention_time_ms
        over_quota = cfg.retention_size_bytes >= 0 and remaining_size > cfg.retention_size_bytes
        return not (expired or over_quota)

    # -- stats ------------------------------------------------------------------------------
    def internal_stats(self, include_ledger_metadata: bool = False) -> dict:
        # Cursor stats are read after the ledger lock is released: a cursor takes its own lock and then the
        # ledger's (mark_delete -> next_position), so holding ours while asking a cursor would deadlock.
        with self._lock:
            cursors = sorted(self._cursors.items())
            current = self._ledgers[-1]
            ledgers = []
            for info in self._ledgers:
                is_current = info is current
                item: dict[str, Any] = {"ledgerId": info.ledger_id, "entries": 0 if is_current else info.entries,
                        "size": 0 if is_current else info.size, "offloaded": False, "underReplicated": False}
                if include_ledger_metadata:
                    try:
                        item["metadata"] = self.storage.ledger_metadata(info.ledger_id).to_bookkeeper_string(
                            password="OMITTED")
                    except LedgerNotFoundError:
                        pass
                ledgers.append(item)
            stats = {
                "entriesAddedCounter": self.entries_added,
                "numberOfEntries": sum(l.entries for l in self._ledgers),
                "totalSize": sum(l.size for l in self._ledgers),
                "currentLedgerEntries": current.entries,
                "currentLedgerSize": current.size,
                "lastLedgerCreatedTimestamp": _iso(self._current_created),
                "waitingCursorsCount": 0,
                "pendingAddEntriesCount": max(0, self._issued - current.entries),
                "lastConfirmedEntry": str(self.last_confirmed_entry),
                "state": self.state,
                "ledgers": ledgers,
                "cursors": {},  # filled below, outside the lock, keeping the key's place in the JSON
                "properties": dict(self._properties),
            }
        stats["cursors"] = {name: c.stats() for name, c in cursors}
        return stats

    def close(self) -> None:
        if not self._closed and not self.read_only:
            self.flush_cursors()
        with self._lock:
            if self._closed or self.read_only:
                self._closed = True
                return
            self._closed = True
            self.state = "Closed"
            current = self._ledgers[-1]
        meta = self.storage.close_ledger(current.ledger_id)
        with self._lock:
            current.entries, current.size = meta.entries, meta.length
            self._persist_info()


class ManagedLedgerFactory:
    def __init__(self, storage: LedgerStorage, entry_cache_bytes: int = 8 << 20):
        self.storage = storage
        self.entry_cache = EntryCache(entry_cache_bytes)

    def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        # On read-only storage (a stopped engine read for stats) every managed ledger is a view: no new ledger.
        return ManagedLedger(self, name, config or ManagedLedgerConfig(), read_only=self.storage.read_only)

    def open_read_only(self, name: str) -> ManagedLedger:
        """A view for stats and reads, e.g. from a second process while the writer runs."""
        if not self.exists(name):
            raise LedgerNotFoundError(f"managed ledger {name}: not found")
        return ManagedLedger(self, name, ManagedLedgerConfig(), read_only=True)

    def list_names(self) -> list[str]:
        keys = self.storage.meta_list(ROOT)
        return sorted(k[len(ROOT):] for k in keys if "/cursors/" not in k)

    def exists(self, name: str) -> bool:
        return self.storage.meta_get(ROOT + name) is not None

    def delete(self, name: str) -> None:
        raw = self.storage.meta_get(ROOT + name)
        if raw is None:
            return
        for info in json.loads(raw).get("ledgers", []):
            try:
                self.storage.delete_ledger(info["ledger_id"])
            except LedgerNotFoundError:
                pass
        updates: dict[str, bytes | None] = {k: None for k in self.storage.meta_list(ROOT + name + "/cursors/")}
        updates[ROOT + name] = None
        self.storage.meta_put_many(updates)
