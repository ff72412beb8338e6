"""Pending-ack stores (Pulsar's MLPendingAckStore + PendingAckHandle), one per transactional subscription.

Acks made inside a transaction are logged here (ACK), held back from the subscription, and applied
to the subscription's cursor only when the transaction commits (COMMIT) or dropped on abort
(ABORT). The log is cleaned by *mark-delete only*, through an index of (highest acked message
position → log position) points: once the subscription's mark-delete passes a point, everything
logged up to that point is useless and the store cursor mark-deletes there.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

from ..codec import AckType, EntryDecodeError, PendingAckMetadata, PendingAckMetadataEntry, PendingAckOp, decode_entry
from .buffered_writer import BufferedWriter, BufferedWriterConfig, TxnPosition
from .managed_ledger import ManagedCursor, ManagedLedgerFactory, managed_ledger_name
from .ackset import has_bit
from .position import Position

CURSOR_NAME = "__pending_ack_state"
SUFFIX = "__transaction_pending_ack"


class PendingAckConflict(Exception):
    status = 409


def pending_ack_topic(topic: str, subscription: str) -> str:
    """persistent://t/ns/<topic>-<sub>__transaction_pending_ack (origin = the partition for partitioned topics)."""
    return f"{topic}-{subscription}{SUFFIX}"


@dataclass
class _TxnAcks:
    positions: dict[Position, tuple[list[int] | None, int | None]] = field(default_factory=dict)
    cumulative: Position | None = None


class PendingAckStore:
    def __init__(self, factory: ManagedLedgerFactory, topic: str, subscription: str, ml_config,
                 writer_config: BufferedWriterConfig, metrics=None, min_index_lag: int = 500):
        self.topic = topic
        self.subscription = subscription
        self.store_topic = pending_ack_topic(topic, subscription)
        self.name = managed_ledger_name(self.store_topic)
        self.ledger = factory.open(self.name, ml_config)
        self.cursor = self.ledger.open_cursor(CURSOR_NAME)
        self.writer = BufferedWriter(self.ledger, writer_config, metrics, name=self.name)
        self.writer_config = writer_config
        self.min_index_lag = min_index_lag
        self.state = "None"
        self.recover_start_time = 0
        self.recover_end_time = 0
        self._lock = threading.RLock()
        self._txns: dict[tuple[int, int], _TxnAcks] = {}
        self._held: dict[Position, tuple[int, int]] = {}  # message position → txn holding it
        self._index: list[tuple[Position, Position]] = []  # (max acked message position, log position)
        self._lag = 0
        self._max_acked: Position | None = None

    # -- log --------------------------------------------------------------------------------
    def _append(self, record: PendingAckMetadataEntry) -> TxnPosition:
        return self.writer.add_sync(record.SerializeToString())

    def _note_logged(self, log_pos: TxnPosition, records: int, acked: list[Position]) -> None:
        for pos in acked:
            if self._max_acked is None or pos > self._max_acked:
                self._max_acked = pos
        self._lag += records
        if self._max_acked is not None and self._lag >= self._index_lag():
            self._index.append((self._max_acked, log_pos.position))
            self._lag = 0

    def _index_lag(self) -> int:
        # Like LogIndexLagBackoff: never below the minimum, larger while many acks are pending.
        return max(self.min_index_lag, len(self._held))

    # -- operations -------------------------------------------------------------------------
    def ack(self, txn: tuple[int, int], positions: list[tuple[Position, list[int] | None, int | None]],
            cumulative: bool = False) -> None:
        with self._lock:
            for pos, _, _ in positions:
                holder = self._held.get(pos)
                if holder is not None and holder != txn:
                    raise PendingAckConflict(
                        f"[{self.topic}][{self.subscription}] Transaction:({txn[0]},{txn[1]}) try to ack message:{pos} "
                        f"in pending ack status, held by ({holder[0]},{holder[1]})"
                    )
            rec = PendingAckMetadataEntry(
                pending_ack_op=PendingAckOp.ACK,
                ack_type=AckType.Cumulative if cumulative else AckType.Individual,
                txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            )
            for pos, ack_set, batch_size in positions:
                meta = PendingAckMetadata(ledgerId=pos.ledger_id, entryId=pos.entry_id)
                if ack_set:
                    meta.ack_set.extend(ack_set)
                if batch_size is not None and not cumulative:
                    meta.batch_size = batch_size
                rec.pending_ack_metadata.append(meta)
        log_pos = self._append(rec)
        with self._lock:
            self._apply_ack(txn, positions, cumulative)
            self._note_logged(log_pos, 1, [p for p, _, _ in positions])

    def _apply_ack(self, txn, positions, cumulative: bool) -> None:
        acks = self._txns.setdefault(txn, _TxnAcks())
        for pos, ack_set, batch_size in positions:
            if cumulative:
                acks.cumulative = pos if acks.cumulative is None or pos > acks.cumulative else acks.cumulative
            else:
                acks.positions[pos] = (list(ack_set) if ack_set else None, batch_size)
                self._held[pos] = txn

    def end(self, txn: tuple[int, int], commit: bool, subscription_cursor: ManagedCursor) -> None:
        """COMMIT applies the transaction's acks to the subscription; ABORT releases them."""
        with self._lock:
            acks = self._txns.get(txn)
        op = PendingAckOp.COMMIT if commit else PendingAckOp.ABORT
        rec = PendingAckMetadataEntry(pending_ack_op=op, ack_type=AckType.Individual,
                                      txnid_most_bits=txn[0], txnid_least_bits=txn[1])
        self._append(rec)
        with self._lock:
            self._txns.pop(txn, None)
            if acks is None:
                return
            for pos in acks.positions:
                self._held.pop(pos, None)
        if commit:
            if acks.positions:
                subscription_cursor.delete_many([(p, a) for p, (a, _) in acks.positions.items()])
            if acks.cumulative is not None:
                subscription_cursor.mark_delete(acks.cumulative)
        self.clear_useless_log_data(subscription_cursor.mark_delete_position)

    def clear_useless_log_data(self, subscription_mark_delete: Position) -> Optional[Position]:
        """Pop index points at or below the subscription's mark-delete; mark-delete the log there."""
        with self._lock:
            last = None
            while self._index and self._index[0][0] <= subscription_mark_delete:
                last = self._index.pop(0)[1]
        if last is not None and last > self.cursor.mark_delete_position:
            self.cursor.mark_delete(last)
        return last

    # -- recovery ---------------------------------------------------------------------------
    def recover(self, clock_ms) -> None:
        with self._lock:
            self.state = "Initializing"
            self.recover_start_time = clock_ms()
            for pos, payload in self.ledger.entries_after(self.cursor.mark_delete_position, 100):
                try:
                    decoded = decode_entry(payload, "pending-ack")
                except EntryDecodeError:
                    continue
                acked: list[Position] = []
                for rec in decoded.records:
                    txn = (rec.txnid_most_bits, rec.txnid_least_bits)
                    if rec.pending_ack_op == PendingAckOp.ACK:
                        items = [(Position(m.ledgerId, m.entryId), list(m.ack_set) or None,
                                  m.batch_size if m.HasField("batch_size") else None)
                                 for m in rec.pending_ack_metadata]
                        self._apply_ack(txn, items, rec.ack_type == AckType.Cumulative)
                        acked.extend(p for p, _, _ in items)
                    else:
                        acks = self._txns.pop(txn, None)
                        if acks:
                            for p in acks.positions:
                                self._held.pop(p, None)
                acked_records = sum(1 for r in decoded.records if r.pending_ack_op == PendingAckOp.ACK)
                self._note_logged(TxnPosition(pos.ledger_id, pos.entry_id, 1, 0), acked_records, acked)
            self.state = "Ready"
            self.recover_end_time = clock_ms()

    # -- stats ------------------------------------------------------------------------------
    def is_held(self, pos: Position) -> bool:
        """True while an open transaction holds an ack on ``pos`` (it is not dispatched again)."""
        with self._lock:
            return pos in self._held

    def pending_transactions(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._txns)

    def position_state(self, pos: Position, batch_index: int | None, subscription_cursor: ManagedCursor) -> str:
        with self._lock:
            if self.state != "Ready":
                return "PendingAckNotReady"
            if pos in self._held:
                if batch_index is None:
                    return "PendingAck"
                txn = self._held[pos]
                ack_set, _ = self._txns[txn].positions[pos]
                if ack_set is None or not has_bit(ack_set, batch_index):
                    return "PendingAck"
        if subscription_cursor.is_deleted(pos) or pos <= subscription_cursor.mark_delete_position:
            return "MarkDelete"
        return "NotInPendingAck"

    def txn_cumulative_position(self, txn: tuple[int, int]) -> Position | None:
        with self._lock:
            acks = self._txns.get(txn)
            return acks.cumulative if acks else None

    def stats(self, low_water_marks: dict[int, int] | None = None) -> dict:
        out = {"state": self.state}
        if low_water_marks is not None:
            out["lowWaterMarks"] = {str(k): v for k, v in low_water_marks.items()}
        out.update({"ongoingTxnSize": len(self._txns), "recoverStartTime": self.recover_start_time,
                    "recoverEndTime": self.recover_end_time})
        return out

    def internal_stats(self, metadata: bool = False) -> dict:
        return {"pendingAckLogStats": {
            "managedLedgerName": self.name,
            "managedLedgerInternalStats": self.ledger.internal_stats(metadata),
        }}

    def update_writer_config(self, config: BufferedWriterConfig) -> None:
        self.writer_config = config
        self.writer.update_config(config)

    def close(self) -> None:
        self.writer.close()
        self.ledger.close()
        self.state = "Close"
