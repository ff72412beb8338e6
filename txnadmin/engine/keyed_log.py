"""A keyed, compacted log on a managed ledger: the engine's version of a compacted Pulsar topic.

Each entry is one JSON object ``{"key": …, "value": …}`` (``value`` null = tombstone). Reading the
log from the cursor's mark-delete onward and keeping the last value per key gives the table.
Compaction rewrites the live values into a fresh ledger and mark-deletes everything before them,
so the managed ledger trims the old ledgers — the latest value per key always survives.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator, Optional

from .managed_ledger import ManagedLedgerFactory
from .position import Position

CURSOR = "__compaction"


class KeyedLog:
    def __init__(self, factory: ManagedLedgerFactory, name: str, ml_config=None, compact_every: int = 1000):
        self.name = name
        self.ledger = factory.open(name, ml_config)
        self.cursor = self.ledger.open_cursor(CURSOR)
        self.compact_every = compact_every
        self._lock = threading.RLock()
        self._table: dict[str, Any] = {}
        self._since_compaction = 0
        self.entries_read = 0
        self._load()

    def _load(self) -> None:
        for _, payload in self.ledger.entries_after(self.cursor.mark_delete_position, 500):
            self.entries_read += 1
            item = json.loads(payload)
            if item.get("value") is None:
                self._table.pop(item["key"], None)
            else:
                self._table[item["key"]] = item["value"]

    def get(self, key: str) -> Optional[Any]:
        with self._lock:
            return self._table.get(key)

    def items(self) -> Iterator[tuple[str, Any]]:
        with self._lock:
            return iter(list(self._table.items()))

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._table)

    def put(self, key: str, value: Any) -> Position:
        """Durable on return; ``None`` deletes the key (a tombstone)."""
        with self._lock:
            pos = self.ledger.add_entry(json.dumps({"key": key, "value": value}, separators=(",", ":")).encode())
            if value is None:
                self._table.pop(key, None)
            else:
                self._table[key] = value
            self._since_compaction += 1
            if self.compact_every and self._since_compaction >= self.compact_every:
                self.compact()
            return pos

    def compact(self) -> None:
        """Rewrite the live table after a rollover and drop everything written before it."""
        with self._lock:
            last_old = self.ledger.last_confirmed_entry
            self.ledger.rollover()
            for key, value in self._table.items():
                self.ledger.add_entry(json.dumps({"key": key, "value": value}, separators=(",", ":")).encode())
            if last_old is not None and last_old.entry_id >= 0 and last_old > self.cursor.mark_delete_position:
                self.cursor.mark_delete(last_old)
            self.ledger.trim()
            self._since_compaction = 0

    def close(self) -> None:
        self.ledger.close()
