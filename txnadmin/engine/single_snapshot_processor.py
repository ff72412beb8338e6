"""Pulsar's default aborted-transaction processor (``transactionBufferSegmentedSnapshotEnabled=false``).

The whole aborted set plus the max read position is one value, keyed by the topic, in the namespace's
``__transaction_buffer_snapshot`` log: every snapshot rewrites everything, which is what PIP-196's
segments avoid for topics with long retention.
"""

from __future__ import annotations

from typing import Optional

from ..names import SNAPSHOT_TOPIC
from .aborted_txn_processor import SnapshotPosition, Txn
from .position import Position
from .tb_snapshot import SnapshotProcessorBase


class SingleSnapshotProcessor(SnapshotProcessorBase):
    """One snapshot per topic holding every aborted transaction."""

    snapshot_type = "Single"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.aborts: dict[Txn, Position] = {}  # in marker order

    def put_aborted(self, txn: Txn, marker: Position, snapshot_position: SnapshotPosition) -> None:
        self.aborts.setdefault(txn, marker)  # nothing is written until the next snapshot

    def is_aborted(self, txn: Txn, read_position: Optional[Position] = None) -> bool:
        return txn in self.aborts

    def aborted_count(self) -> int:
        return len(self.aborts)

    def trim_expired(self, first_live_ledger: int, snapshot_position: Optional[SnapshotPosition] = None) -> int:
        dropped = 0
        while self.aborts:
            txn, marker = next(iter(self.aborts.items()))
            if marker.ledger_id >= first_live_ledger:
                break
            del self.aborts[txn]
            dropped += 1
        return dropped

    def recover(self, first_live_ledger: int) -> Optional[Position]:
        value = self.service.read_latest(self.namespace, SNAPSHOT_TOPIC, self.topic)
        if value is None:
            return None
        for most, least, ledger_id, entry_id in value["aborts"]:
            self.aborts[(most, least)] = Position(ledger_id, entry_id)
        self.trim_expired(first_live_ledger)
        mrp = value["maxReadPosition"]
        return Position(mrp["ledgerId"], mrp["entryId"])

    def take_snapshot(self, snapshot_position: SnapshotPosition) -> None:
        mrp = snapshot_position()
        value = {
            "topicName": self.topic,
            "maxReadPosition": {"ledgerId": mrp.ledger_id, "entryId": mrp.entry_id},
            # [txnIdMostBits, txnIdLeastBits, ledgerId, entryId], Pulsar's AbortTxnMetadata field order
            "aborts": [[t[0], t[1], p.ledger_id, p.entry_id] for t, p in self.aborts.items()],
        }
        self.bytes_written += self.service.write(self.namespace, SNAPSHOT_TOPIC, self.topic, value)
        self.last_snapshot_timestamp = self.clock_ms()

    def has_snapshot(self) -> bool:
        return self.service.has(self.namespace, SNAPSHOT_TOPIC, self.topic)

    def segments_stats(self, detailed: bool) -> Optional[dict]:
        return None

    def internal_stats(self, metadata: bool) -> dict:
        return {"snapshotType": self.snapshot_type,
                "singleSnapshotSystemTopicInternalStats": self.service.internal_stats(self.namespace, SNAPSHOT_TOPIC,
                                                                                      metadata)}
