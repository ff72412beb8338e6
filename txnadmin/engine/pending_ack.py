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
from typing import Any, Optional, cast

from ..codec import AckType, EntryDecodeError, PendingAckMetadata, PendingAckMetadataEntry, PendingAckOp, decode_entry
from ..names import PENDING_ACK_CURSOR, managed_ledger_name, pending_ack_topic
from .completion import Completion, Pending
from .buffered_writer import BufferedWriter, BufferedWriterConfig, TxnPosition
from .managed_ledger import ManagedCursor, ManagedLedgerFactory
from .ackset import has_bit
from .cursor import WORD_MASK
from .older_brokers import refuse_batched
from .position import Position

# Read once: each attribute of a protobuf enum wrapper is a Python-level lookup, and acks and ends use them per record.
OP_ACK, OP_COMMIT, OP_ABORT = PendingAckOp.ACK, PendingAckOp.COMMIT, PendingAckOp.ABORT
INDIVIDUAL, CUMULATIVE = AckType.Individual, AckType.Cumulative


class PendingAckConflict(Exception):
    """Pulsar's TransactionConflictException."""


class PendingAckNotReady(Exception):
    """The store has not replayed its log (a broker older than PIP-160 stopped at a batched entry): no ack."""


class PendingAckNotAllowed(Exception):
    """Pulsar's NotAllowedException (e.g. a cumulative ack of several positions)."""


def _acked_bits(ack_set: list[int] | None, batch_size: int) -> int:
    """The batch indexes an ack set acknowledges (bit = 1 here), within ``batch_size``.

    Ack sets say 1 = not acknowledged; Pulsar's overlap test sets every bit from the batch size up before comparing,
    so only indexes inside the batch can collide.
    """
    remaining = 0
    for i, word in enumerate(ack_set or []):
        remaining |= (word & WORD_MASK) << (64 * i)
    return ~remaining & ((1 << batch_size) - 1)


def _to_ack_set(remaining: int) -> list[int]:
    """Bits (1 = not acknowledged) as Pulsar's signed long[] words, trailing zero words dropped."""
    words = []
    while remaining:
        word = remaining & WORD_MASK
        words.append(word - (1 << 64) if word >> 63 else word)
        remaining >>= 64
    return words


def _first_set_bit(ack_set: list[int] | None) -> int | None:
    for i, word in enumerate(ack_set or []):
        word &= WORD_MASK
        if word:
            return 64 * i + (word & -word).bit_length() - 1
    return None


def _ack_set_key(pos: Position, ack_set: list[int] | None) -> tuple[int, int, float]:
    """Pulsar's compareToWithAckSet: same entry → the one acknowledging more batch indexes is later."""
    first = _first_set_bit(ack_set) if ack_set else None
    return (pos.ledger_id, pos.entry_id, float("inf") if first is None else first)


def _batch_width(ack_set: list[int] | None, batch_size: int | None) -> int:
    return batch_size if batch_size else 64 * max(1, len(ack_set or []))


@dataclass
class _Held:
    """One position held by open transactions (Pulsar's individualAckPositions): for a batch, the AND of every
    holder's ack set (1 = not acknowledged by any) and the batch size; for a whole entry, no ack set."""

    ack_set: list[int] | None
    batch_size: int


@dataclass
class _TxnAcks:
    positions: dict[Position, tuple[list[int] | None, int | None]] = field(default_factory=dict)
    cumulative: tuple | None = None  # (txn, position, ack set), filled in when the transaction ends


class PendingAckStore:
    def __init__(self, factory: ManagedLedgerFactory, topic: str, subscription: str, ml_config,
                 writer_config: BufferedWriterConfig, metrics=None, min_index_lag: int = 500, encoded: bool = False):
        self.topic = topic
        self.subscription = subscription
        self.store_topic = pending_ack_topic(topic, subscription, encoded)  # named as the claimed version names it
        self.name = managed_ledger_name(self.store_topic)
        self.ledger = factory.open(self.name, ml_config)
        self.cursor = self.ledger.open_cursor(PENDING_ACK_CURSOR)
        self.writer = BufferedWriter(self.ledger, writer_config, metrics, name=self.name)
        self.writer_config = writer_config
        self.min_index_lag = min_index_lag
        self.state = "None"
        self.recover_start_time = 0
        self.recover_end_time = 0
        self._lock = threading.RLock()
        self._txns: dict[tuple[int, int], _TxnAcks] = {}
        self._held: dict[Position, _Held] = {}
        # Pulsar keeps one cumulative ack per subscription: (txn, position, ack set)
        self._cumulative: tuple[tuple[int, int], Position, list[int] | None] | None = None
        self._index: list[tuple[Position, Position]] = []  # (max acked message position, log position)
        self._lag = 0
        self._max_acked: Position | None = None

    # -- log --------------------------------------------------------------------------------
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

    # -- conflicts (PendingAckHandleImpl) ---------------------------------------------------
    def _prefix(self, txn: tuple[int, int]) -> str:
        return f"[{self.topic}][{self.subscription}] Transaction:({txn[0]},{txn[1]})"

    def _individual_conflict(self, txn, positions, cursor: ManagedCursor | None) -> str | None:
        """Why Pulsar would refuse these individual acks, or None."""
        for pos, ack_set, batch_size in positions:
            if cursor is not None and cursor.is_deleted(pos):
                return f"{self._prefix(txn)} try to ack message:{pos} already acked before."
            held = self._held.get(pos)
            if ack_set:
                width = _batch_width(ack_set, batch_size)
                mine = _acked_bits(ack_set, width)
                on_cursor = cursor.deleted_batch_indexes(pos) if cursor is not None else None
                if on_cursor is not None and mine & _acked_bits(on_cursor, width):
                    return f"{self._prefix(txn)} try to ack message:{pos} already acked before."
                if held is not None and (held.ack_set is None or mine & _acked_bits(held.ack_set, width)):
                    return f"{self._prefix(txn)} try to ack batch message:{pos} in pending ack status."
            elif held is not None:
                return f"{self._prefix(txn)} try to ack message:{pos} in pending ack status."
        return None

    def _cumulative_conflict(self, txn, pos: Position, ack_set, cursor: ManagedCursor | None) -> str | None:
        if cursor is not None and pos <= cursor.mark_delete_position:
            return (f"{self._prefix(txn)} try to cumulative ack position: {pos} within range of cursor's "
                    f"markDeletePosition: {cursor.mark_delete_position}")
        current = self._cumulative
        if current is not None and (current[0] != txn
                                    or _ack_set_key(pos, ack_set) <= _ack_set_key(current[1], current[2])):
            return (f"{self._prefix(txn)} try to cumulative batch ack position: {pos} within range of current "
                    f"currentPosition: {current[1]}")
        return None

    # -- operations -------------------------------------------------------------------------
    def ack(self, txn: tuple[int, int], positions: list[tuple[Position, list[int] | None, int | None]],
            cumulative: bool = False, subscription_cursor: ManagedCursor | None = None) -> None:
        """Log and hold acks of an open transaction; refused (PendingAckConflict) as Pulsar refuses them.

        Pulsar checks after the record is written; checking first keeps refused acks out of the log.
        """
        self.ack_async(txn, positions, cumulative, subscription_cursor)()

    def ack_async(self, txn: tuple[int, int], positions: list[tuple[Position, list[int] | None, int | None]],
                  cumulative: bool = False, subscription_cursor: ManagedCursor | None = None) -> Pending:
        """As :meth:`ack`, but only queue the ACK record: a refusal raises at once, and the returned function waits
        until the record is durable."""
        if cumulative and len(positions) != 1:
            raise PendingAckNotAllowed(f"{self._prefix(txn)} invalid cumulative ack received with multiple "
                                       "message ids.")
        with self._lock:
            if self.state != "Ready":
                raise PendingAckNotReady(f"{self._prefix(txn)} the pending ack store of {self.topic} "
                                         f"{self.subscription} is not ready (state {self.state})")
            if cumulative:
                pos, ack_set, _ = positions[0]
                reason = self._cumulative_conflict(txn, pos, ack_set, subscription_cursor)
            else:
                reason = self._individual_conflict(txn, positions, subscription_cursor)
            if reason:
                raise PendingAckConflict(reason)
            rec = PendingAckMetadataEntry(
                pending_ack_op=OP_ACK,
                ack_type=CUMULATIVE if cumulative else INDIVIDUAL,
                txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            )
            for pos, ack_set, batch_size in positions:
                meta = PendingAckMetadata(ledgerId=pos.ledger_id, entryId=pos.entry_id)
                if ack_set:
                    meta.ack_set.extend(ack_set)
                if not cumulative:
                    # Pulsar's Consumer sends batch size 0 for a message outside a batch; cumulative acks carry none
                    meta.batch_size = batch_size or 0
                rec.pending_ack_metadata.append(meta)
            # Held before the write, so a racing ack of the same message is refused. A failed write keeps them
            # held, as Pulsar does: whether the record reached the log is unknown, so the transaction has to end
            # (abort or time out) to release them.
            self._apply_ack(txn, positions, cumulative)
            done = Completion()
            # Queued under the store lock, so ACK records reach the log in the order their checks passed.
            self.writer.add(rec.SerializeToString(), done)

        def finish(log_pos: TxnPosition) -> None:
            with self._lock:
                self._note_logged(log_pos, 1, [p for p, _, _ in positions])

        return Pending(done, finish, timeout=30, what=f"{self.name}: write")

    def _apply_ack(self, txn, positions, cumulative: bool) -> None:
        if cumulative:
            pos, ack_set, _ = positions[0]
            self._cumulative = (txn, pos, list(ack_set) if ack_set else None)
            self._txns.setdefault(txn, _TxnAcks())
            return
        acks = self._txns.setdefault(txn, _TxnAcks())
        for pos, ack_set, batch_size in positions:
            if ack_set:
                width = _batch_width(ack_set, batch_size)
                previous = acks.positions.get(pos)
                mine = _acked_bits(ack_set, width) | (_acked_bits(previous[0], width) if previous else 0)
                acks.positions[pos] = (_to_ack_set(~mine & ((1 << width) - 1)), width)
                held = self._held.get(pos)
                if held is None:
                    self._held[pos] = _Held(_to_ack_set(~mine & ((1 << width) - 1)), width)
                elif held.ack_set is not None:
                    both = _acked_bits(held.ack_set, width) | mine
                    self._held[pos] = _Held(_to_ack_set(~both & ((1 << width) - 1)), width)
            else:
                acks.positions[pos] = (None, batch_size)
                self._held.setdefault(pos, _Held(None, batch_size or 0))

    def _release(self, txn) -> _TxnAcks | None:
        """Forget a transaction's acks (it ended): its positions and batch indexes are no longer held."""
        acks = self._txns.pop(txn, None)
        cumulative = None
        if self._cumulative is not None and self._cumulative[0] == txn:
            cumulative, self._cumulative = self._cumulative, None
        if acks is None:
            return None
        for pos, (ack_set, width) in acks.positions.items():
            held = self._held.get(pos)
            if held is None:
                continue
            if ack_set is None or held.ack_set is None:
                self._held.pop(pos, None)
                continue
            assert width is not None  # _apply_ack stores an ack set with its batch width, always
            mine = _acked_bits(ack_set, width)
            rest = _acked_bits(held.ack_set, width) & ~mine
            if rest:
                self._held[pos] = _Held(_to_ack_set(~rest & ((1 << width) - 1)), width)
            else:
                self._held.pop(pos, None)
        acks.cumulative = cumulative
        return acks

    def end(self, txn: tuple[int, int], commit: bool, subscription_cursor: ManagedCursor) -> None:
        """COMMIT applies the transaction's acks to the subscription; ABORT releases them."""
        self.end_async(txn, commit, subscription_cursor)()

    def end_async(self, txn: tuple[int, int], commit: bool,
                  subscription_cursor: ManagedCursor) -> Pending:
        """Queue the COMMIT/ABORT record; the returned function waits for it, then applies or releases the acks."""
        op = OP_COMMIT if commit else OP_ABORT
        rec = PendingAckMetadataEntry(pending_ack_op=op, ack_type=INDIVIDUAL,
                                      txnid_most_bits=txn[0], txnid_least_bits=txn[1])
        done = Completion()
        self.writer.add(rec.SerializeToString(), done)

        def finish(_log_pos: TxnPosition) -> None:
            with self._lock:
                acks = self._release(txn)
            if acks is None:
                return
            if commit:
                _apply_to_subscription(acks, subscription_cursor)
            # Only up to what the subscription has persisted: the acks just applied may still be in memory only,
            # and until they are on disk this log's COMMIT is what a restart re-applies them from.
            self.clear_useless_log_data(subscription_cursor.persisted_mark_delete_position)

        return Pending(done, finish, timeout=30, what=f"{self.name}: write")

    def clear_useless_log_data(self, subscription_mark_delete: Position) -> Optional[Position]:
        """Pop index points at or below the subscription's mark-delete; mark-delete the log there."""
        with self._lock:
            last = None
            while self._index and self._index[0][0] <= subscription_mark_delete:
                last = self._index.pop(0)[1]
        if last is not None and last > self.cursor.mark_delete_position:
            # Lazily persisted: it only ever trails the subscription's own (persisted) acks, so losing it in a crash
            # means replaying acks the subscription already covers, which recovery skips.
            self.cursor.mark_delete(last, persist=False)
        return last

    # -- recovery ---------------------------------------------------------------------------
    def recover(self, clock_ms, subscription_cursor: ManagedCursor | None = None, apply_commits: bool = True,
                older: str | None = None) -> None:
        """Replay the log after its mark-delete. As Pulsar's handle*AckRecover, an ACK record that the
        subscription's own state already covers (a deleted position, an acknowledged batch index, a cumulative ack
        at or below the mark-delete) is skipped; a COMMIT found in the log is applied to the subscription again,
        so a crash between the COMMIT record and the subscription update loses nothing. ``apply_commits`` False
        (a read-only view) judges by the subscription but writes nothing to it. On a broker without PIP-160's
        reader (``older``, its version) a batched entry raises BatchedEntryUnreadable and the store stays
        Initializing: Pulsar 2.10's handle never becomes ready."""
        with self._lock:
            self.state = "Initializing"
            self.recover_start_time = clock_ms()
            for pos, payload in self.ledger.entries_after(self.cursor.mark_delete_position, 100):
                try:
                    decoded = decode_entry(payload, "pending-ack")
                except EntryDecodeError:
                    continue
                refuse_batched(decoded, self.name, pos, older)
                acked: list[Position] = []
                records = cast(list[PendingAckMetadataEntry], decoded.records)  # the "pending-ack" kind's type
                for rec in records:
                    txn = (rec.txnid_most_bits, rec.txnid_least_bits)
                    if rec.pending_ack_op == OP_ACK:
                        items = [(Position(m.ledgerId, m.entryId), list(m.ack_set) or None,
                                  m.batch_size if m.HasField("batch_size") and m.batch_size else None)
                                 for m in rec.pending_ack_metadata]
                        acked.extend(p for p, _, _ in items)
                        cumulative = rec.ack_type == CUMULATIVE
                        if not items:
                            continue
                        if cumulative:
                            if self._cumulative_conflict(txn, items[0][0], items[0][1], subscription_cursor):
                                continue
                        elif self._individual_conflict(txn, items, subscription_cursor):
                            continue
                        self._apply_ack(txn, items[:1] if cumulative else items, cumulative)
                    else:
                        acks = self._release(txn)
                        if acks is not None and rec.pending_ack_op == OP_COMMIT \
                                and subscription_cursor is not None and apply_commits:
                            _apply_to_subscription(acks, subscription_cursor)
                acked_records = sum(1 for r in records if r.pending_ack_op == OP_ACK)
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
        """Pulsar's checkPositionInPendingAckState: not ready, then the subscription's own acks, then the held ones."""
        with self._lock:
            if self.state != "Ready":
                return "PendingAckNotReady"
            if subscription_cursor.is_deleted(pos):
                return "MarkDelete"
            held = self._held.get(pos)
            if held is None:
                return "NotInPendingAck"
            if batch_index is None:
                return "PendingAck"
            if held.ack_set is not None and batch_index >= held.batch_size:
                return "InvalidPosition"
            if held.ack_set is None or not has_bit(held.ack_set, batch_index):
                return "PendingAck"
            return "NotInPendingAck"

    def txn_cumulative_position(self, txn: tuple[int, int]) -> str | None:
        """``L:E``, or ``L:E:i`` for a batch message (i = the first unacknowledged index − 1, as Pulsar prints it)."""
        with self._lock:
            current = self._cumulative
        if current is None or current[0] != txn:
            return None
        first = _first_set_bit(current[2])
        return str(current[1]) if first is None else f"{current[1]}:{first - 1}"

    def stats(self, low_water_marks: dict[int, int] | None = None) -> dict:
        out: dict[str, Any] = {"state": self.state}
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


def _apply_to_subscription(acks: _TxnAcks, cursor: ManagedCursor) -> None:
    """A committed transaction's acks reach the subscription: individual deletes, then the cumulative ack.

    In memory, persisted with the cursor's next persisted change or the maintenance sweep (about a second), as
    Pulsar persists a subscription's acks lazily: the store's log keeps the COMMIT until the subscription's
    persisted mark-delete covers it (clear_useless_log_data), so a crash before then re-applies it on replay."""
    if acks.positions:
        cursor.delete_many([(p, a) for p, (a, _) in acks.positions.items()], persist=False)
    if acks.cumulative is not None:
        _, pos, ack_set = acks.cumulative
        if ack_set:
            # Pulsar's mark-delete with an ack set: up to the entry before, and the batch indexes on the entry
            cursor.mark_delete(Position(pos.ledger_id, pos.entry_id - 1), persist=False)
            cursor.delete_many([(pos, ack_set)], persist=False)
        else:
            cursor.mark_delete(pos, persist=False)
