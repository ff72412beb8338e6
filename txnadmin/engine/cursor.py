"""Managed cursors: mark-delete, individual deletes and batch-index deletes (Pulsar's ManagedCursorImpl).

State persists in the storage's metadata store (Pulsar keeps it in a cursor ledger and ZooKeeper).
Individual deletes are kept as ranges per ledger, so a pinned mark-delete with thousands of deleted
positions after it stays small to persist.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Optional

from .position import Position

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger

WORD_MASK = (1 << 64) - 1


def _signed(word: int) -> int:
    word &= WORD_MASK
    return word - (1 << 64) if word >> 63 else word


def and_ack_sets(a: list[int], b: list[int]) -> list[int]:
    """Bitwise AND of two long[] ack sets, trailing zero words dropped (1 = not yet deleted)."""
    out = [_signed(x & y) for x, y in zip(a, b, strict=False)]  # words past the shorter set AND to 0
    while out and out[-1] == 0:
        out.pop()
    return out


class ManagedCursor:
    def __init__(self, ledger: "ManagedLedger", name: str, mark_delete: Position, state: Optional[dict] = None):
        self.ledger = ledger
        self.name = name
        self._lock = threading.RLock()
        self.mark_delete_position = mark_delete
        self._deleted: dict[int, list[list[int]]] = {}  # ledger id → sorted [first, last] entry ranges
        self._ack_sets: dict[Position, list[int]] = {}
        self.messages_consumed = 0
        self.last_persisted_ms = 0
        self._dirty = False  # changed in memory, not persisted yet (persist=False)
        if state:
            self.mark_delete_position = Position.parse(state["markDelete"])
            self._deleted = {int(k): [list(r) for r in v] for k, v in state.get("deleted", {}).items()}
            self._ack_sets = {Position.parse(k): list(v) for k, v in state.get("ackSets", {}).items()}
        # The mark-delete of the newest state known to be persisted (Pulsar's getPersistentMarkDeletedPosition): a
        # pending-ack store trims its log only up to here, so a commit applied lazily to this cursor can still be
        # replayed from the store's log after a crash.
        self.persisted_mark_delete_position = self.mark_delete_position

    # -- persistence -----------------------------------------------------------------------
    def to_state(self) -> dict:
        return {
            "markDelete": str(self.mark_delete_position),
            "deleted": {str(k): v for k, v in self._deleted.items() if v},
            "ackSets": {str(k): v for k, v in self._ack_sets.items()},
        }

    def _snapshot(self) -> tuple[bytes, int, Position]:
        """The state to persist, its version and its mark-delete; taken under the cursor lock."""
        self._dirty = False
        return dumps_state(self), self.ledger.storage.next_meta_version(), self.mark_delete_position

    def _persist(self, snapshot: tuple[bytes, int, Position]) -> None:
        """Make a snapshot durable. Called without the cursor lock, so concurrent acks of one cursor share one
        group commit instead of queueing behind each other's sync; the version keeps an older snapshot from
        overwriting a newer one."""
        state, version, mark_delete = snapshot
        self.ledger.persist_cursor(self, state, version)
        with self._lock:
            if mark_delete > self.persisted_mark_delete_position:
                self.persisted_mark_delete_position = mark_delete

    # -- queries ---------------------------------------------------------------------------
    @property
    def read_position(self) -> Position:
        return self.ledger.next_position(self.mark_delete_position) or self.ledger.next_write_position()

    def is_deleted(self, position: Position) -> bool:
        with self._lock:
            if position <= self.mark_delete_position:
                return True
            return self._in_ranges(position)

    def _in_ranges(self, position: Position) -> bool:
        for first, last in self._deleted.get(position.ledger_id, ()):
            if first <= position.entry_id <= last:
                return True
        return False

    def deleted_batch_indexes(self, position: Position) -> Optional[list[int]]:
        """The stored ack set of a partially deleted batch (1 = not yet deleted), or None."""
        with self._lock:
            words = self._ack_sets.get(position)
            return list(words) if words is not None else None

    # -- deletes ---------------------------------------------------------------------------
    def delete(self, position: Position, ack_set: Optional[list[int]] = None) -> None:
        self.delete_many([(position, ack_set)])

    def flush(self) -> None:
        """Persist changes made with ``persist=False`` (the maintenance sweep and close call this)."""
        with self._lock:
            if not self._dirty:
                return
            snapshot = self._snapshot()
        self._persist(snapshot)

    def delete_many(self, items: list[tuple[Position, Optional[list[int]]]], persist: bool = True) -> None:
        """Delete positions (whole entries, or batch indexes with an ack set).

        ``persist=False`` leaves the change in memory until the next persisted change or :meth:`flush`, as
        Pulsar persists cursor positions lazily: only for deletes whose loss a restart repairs by itself (a
        transaction log replaying records of ended transactions, markers a reader skips again).
        """
        snapshot = None
        with self._lock:
            changed = False
            for position, ack_set in items:
                if position <= self.mark_delete_position or self._in_ranges(position):
                    continue
                if ack_set is not None:
                    current = self._ack_sets.get(position)
                    merged = and_ack_sets(current, ack_set) if current is not None else list(ack_set)
                    while merged and merged[-1] == 0:
                        merged.pop()
                    if merged:
                        self._ack_sets[position] = merged
                        changed = True
                        continue
                self._ack_sets.pop(position, None)
                self._add_range(position)
                self.messages_consumed += 1
                changed = True
            if changed:
                self._advance()
                if persist:
                    snapshot = self._snapshot()
                else:
                    self._dirty = True
        if snapshot is not None:
            self._persist(snapshot)

    def mark_delete(self, position: Position, persist: bool = True) -> None:
        with self._lock:
            if position <= self.mark_delete_position:
                return
            self.mark_delete_position = position
            self._forget_through(position)
            self._advance()
            if not persist:
                self._dirty = True
                return
            snapshot = self._snapshot()
        self._persist(snapshot)

    def _add_range(self, position: Position) -> None:
        ranges = self._deleted.setdefault(position.ledger_id, [])
        e = position.entry_id
        for i, (first, last) in enumerate(ranges):
            if first - 1 <= e <= last + 1:
                ranges[i] = [min(first, e), max(last, e)]
                if i + 1 < len(ranges) and ranges[i + 1][0] <= ranges[i][1] + 1:
                    ranges[i] = [ranges[i][0], max(ranges[i][1], ranges[i + 1][1])]
                    del ranges[i + 1]
                if i > 0 and ranges[i - 1][1] + 1 >= ranges[i][0]:
                    ranges[i - 1] = [ranges[i - 1][0], max(ranges[i - 1][1], ranges[i][1])]
                    del ranges[i]
                return
            if e < first:
                ranges.insert(i, [e, e])
                return
        ranges.append([e, e])

    def _forget_through(self, position: Position) -> None:
        for ledger_id in list(self._deleted):
            if ledger_id < position.ledger_id:
                del self._deleted[ledger_id]
            elif ledger_id == position.ledger_id:
                kept = []
                for first, last in self._deleted[ledger_id]:
                    if last <= position.entry_id:
                        continue
                    kept.append([max(first, position.entry_id + 1), last])
                self._deleted[ledger_id] = kept
        for pos in [p for p in self._ack_sets if p <= position]:
            del self._ack_sets[pos]

    def _advance(self) -> None:
        """Move mark-delete over the contiguous deleted prefix (across ledger ends and empty ledgers)."""
        while True:
            nxt = self.ledger.next_position(self.mark_delete_position)
            if nxt is None:
                return
            ranges = self._deleted.get(nxt.ledger_id)
            if not ranges or ranges[0][0] != nxt.entry_id:
                return  # the next entry is still undeleted
            last = ranges[0][1]
            self.mark_delete_position = Position(nxt.ledger_id, last)
            ranges.pop(0)
            if not ranges:
                self._deleted.pop(nxt.ledger_id, None)
            for pos in [p for p in self._ack_sets if p <= self.mark_delete_position]:
                del self._ack_sets[pos]

    # -- stats -----------------------------------------------------------------------------
    def individually_deleted_messages(self) -> str:
        parts = []
        for ledger_id in sorted(self._deleted):
            for first, last in self._deleted[ledger_id]:
                parts.append(f"({ledger_id}:{first - 1}..{ledger_id}:{last}]")
        return "[" + ", ".join(parts) + "]"

    def stats(self) -> dict:
        with self._lock:
            ranges = sum(len(v) for v in self._deleted.values())
            read = self.read_position
            return {
                "markDeletePosition": str(self.mark_delete_position),
                "readPosition": str(read),
                "waitingReadOp": False,
                "pendingReadOps": 0,
                "messagesConsumedCounter": self.messages_consumed,
                "cursorLedger": -1,
                "cursorLedgerLastEntry": -1,
                "individuallyDeletedMessages": self.individually_deleted_messages(),
                "lastLedgerSwitchTimestamp": "",
                "state": "Open",
                "active": False,
                "numberOfEntriesSinceFirstNotAckedMessage": self.ledger.entries_between(self.mark_delete_position),
                "totalNonContiguousDeletedMessagesRange": ranges,
                "subscriptionHavePendingRead": False,
                "subscriptionHavePendingReplayRead": False,
                "properties": {},
            }


def dumps_state(cursor: ManagedCursor) -> bytes:
    return json.dumps(cursor.to_state(), separators=(",", ":")).encode()
