"""Terminated-transaction preserver (PIP-255): idempotent commit and abort.

Pulsar drops a transaction from memory the moment it ends, so a client that retries an end-txn
after losing the answer gets "transaction not found" and may resend its messages in a new
transaction: duplicates. The preserver remembers, per client name, the outcome of that client's
most recent ended transactions, durably in a keyed compacted log
``pulsar/system/persistent/__terminated_txn_state_<tcId>`` (key = client name), so a retry learns
the real outcome. Unlike PR #20356, retention is its own setting (not the transaction timeout) and
memory is bounded per client and in total (oldest evicted first, evictions counted).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

from ..names import preserver_log_name
from .keyed_log import KeyedLog
from .managed_ledger import ManagedLedgerFactory

COMMITTED = "COMMITTED"
ABORTED = "ABORTED"


@dataclass(frozen=True)
class Preserved:
    txn_id: tuple[int, int]
    status: str  # COMMITTED or ABORTED (ABORTING/COMMITTING are preserved as their outcome)
    end_time: int
    client_name: str


class TransactionPreserver:
    def __init__(self, factory: ManagedLedgerFactory, tc_id: int, *, per_client: int, retention_ms: int,
                 max_total: int, clock_ms: Callable[[], int], ml_config=None):
        self.tc_id = tc_id
        self.per_client = per_client
        self.retention_ms = retention_ms
        self.max_total = max_total
        self.clock_ms = clock_ms
        self.evictions = 0
        self.expirations = 0
        self._lock = threading.Lock()
        self._log = KeyedLog(factory, preserver_log_name(tc_id), ml_config, compact_every=500)
        # client → OrderedDict[(most, least)] = Preserved, oldest first
        self._by_client: dict[str, OrderedDict[tuple[int, int], Preserved]] = {}
        for client, value in self._log.items():
            entries: OrderedDict[tuple[int, int], Preserved] = OrderedDict()
            for item in value.get("txnMetas", []):
                txn = tuple(item["txnId"])
                entries[txn] = Preserved(txn, item["status"], item["endTime"], client)
            self._by_client[client] = entries

    @property
    def enabled(self) -> bool:
        return self.per_client > 0

    def total(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._by_client.values())

    def preserve(self, client_name: str, txn: tuple[int, int], status: str) -> None:
        """Durably remember that ``client_name``'s ``txn`` ends with ``status`` (before the final log record)."""
        if not self.enabled or not client_name:
            return
        with self._lock:
            entries = self._by_client.setdefault(client_name, OrderedDict())
            entries[txn] = Preserved(txn, status, self.clock_ms(), client_name)
            entries.move_to_end(txn)
            while len(entries) > self.per_client:
                entries.popitem(last=False)
                self.evictions += 1
            touched = {client_name}
            touched |= self._evict_total()
            for client in touched:
                self._persist(client)

    def _evict_total(self) -> set[str]:
        touched: set[str] = set()
        while self.max_total and sum(len(v) for v in self._by_client.values()) > self.max_total:
            oldest_client = min((c for c, v in self._by_client.items() if v),
                                key=lambda c: next(iter(self._by_client[c].values())).end_time)
            self._by_client[oldest_client].popitem(last=False)
            self.evictions += 1
            touched.add(oldest_client)
        return touched

    def _persist(self, client: str) -> None:
        entries = self._by_client.get(client)
        if not entries:
            self._by_client.pop(client, None)
            self._log.put(client, None)
            return
        self._log.put(client, {"txnMetas": [
            {"txnId": list(p.txn_id), "status": p.status, "endTime": p.end_time} for p in entries.values()
        ]})

    def lookup(self, txn: tuple[int, int], client_name: Optional[str] = None) -> Optional[Preserved]:
        with self._lock:
            clients = [client_name] if client_name else list(self._by_client)
            for client in clients:
                entries = self._by_client.get(client)
                found = entries.get(txn) if entries is not None else None
                if found is not None:
                    return found
        return None

    def expire(self) -> int:
        """Drop preserved outcomes older than the retention; returns how many went."""
        cutoff = self.clock_ms() - self.retention_ms
        dropped = 0
        with self._lock:
            for client in list(self._by_client):
                entries = self._by_client[client]
                stale = [t for t, p in entries.items() if p.end_time < cutoff]
                for t in stale:
                    del entries[t]
                if stale:
                    dropped += len(stale)
                    self._persist(client)
            self.expirations += dropped
        return dropped

    def close(self) -> None:
        self._log.close()
