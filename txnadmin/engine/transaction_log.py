"""A coordinator's transaction log: managed ledger + cursor + buffered writer (Pulsar's MLTransactionLogImpl).

Records go through the buffered writer (batched or plain); every record's position, batch index
included, is handed back so the coordinator can delete exactly that record once its transaction ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterator, cast

from ..codec import EntryDecodeError, TransactionMetadataEntry, decode_entry
from ..names import TC_LOG_CURSOR, transaction_log_name
from .buffered_writer import BufferedWriter, BufferedWriterConfig, TxnPosition
from .completion import Completion, Pending
from .managed_ledger import ManagedLedger, ManagedLedgerFactory
from .ackset import has_bit
from .older_brokers import refuse_batched

MAX_LOCAL_TXN_ID = "max_local_txn_id"


@dataclass(frozen=True)
class ReplayedRecord:
    record: TransactionMetadataEntry
    position: TxnPosition


class TransactionLog:
    def __init__(self, factory: ManagedLedgerFactory, tc_id: int, ml_config, writer_config: BufferedWriterConfig,
                 metrics=None):
        self.tc_id = tc_id
        self.name = transaction_log_name(tc_id)
        self.ledger: ManagedLedger = factory.open(self.name, ml_config)
        self.cursor = self.ledger.open_cursor(TC_LOG_CURSOR)
        self.writer_config = writer_config
        self.writer = BufferedWriter(self.ledger, writer_config, metrics, name=self.name)
        self._max_local_txn_id = -1
        self.records_written = 0  # since this process opened the log
        self._lock = threading.Lock()
        # Like Pulsar's MLTransactionSequenceIdGenerator: the highest id goes into the managed ledger's properties
        # whenever its ledger list is written (rollover, trim, close), so it survives the trim of every ledger.
        self.ledger.add_info_interceptor(self._save_max_local_txn_id)

    def _save_max_local_txn_id(self, properties: dict[str, str]) -> None:
        # Never lower it: before recovery has read the log the in-memory value is still -1.
        saved = int(properties.get(MAX_LOCAL_TXN_ID, "-1"))
        properties[MAX_LOCAL_TXN_ID] = str(max(saved, self._max_local_txn_id))

    # -- sequence ----------------------------------------------------------------------------
    def recover_max_local_txn_id(self) -> int:
        """Last record of the last entry wins; the ML property covers a log with no entries left."""
        value = int(self.ledger.properties().get(MAX_LOCAL_TXN_ID, "-1"))
        last = self.ledger.last_confirmed_entry
        if last is not None and last.entry_id >= 0:
            try:
                decoded = decode_entry(self.ledger.read_entry(last), "txn-log")
                newest = cast(TransactionMetadataEntry, decoded.records[-1])  # the "txn-log" kind's type
                if newest.HasField("max_local_txn_id"):
                    value = max(value, newest.max_local_txn_id)
            except (EntryDecodeError, LookupError):
                pass
        self._max_local_txn_id = value
        return value

    def next_local_txn_id(self) -> int:
        with self._lock:
            self._max_local_txn_id += 1
            return self._max_local_txn_id

    @property
    def max_local_txn_id(self) -> int:
        return self._max_local_txn_id

    def raise_max_local_txn_id(self, seen: int) -> None:
        """A replayed record names an id: never hand it out again (the sequence only grows)."""
        with self._lock:
            self._max_local_txn_id = max(self._max_local_txn_id, seen)

    # -- writing -----------------------------------------------------------------------------
    def append(self, record: TransactionMetadataEntry,
               callback: Callable[[TxnPosition | None, BaseException | None], None]) -> None:
        self.records_written += 1
        self.writer.add(record.SerializeToString(), callback)

    def append_pending(self, record: TransactionMetadataEntry, timeout: float = 30) -> Pending:
        """Queue the record; the returned wait gives its position once it is durable (see :mod:`.completion`)."""
        done = Completion()
        self.append(record, done)
        return Pending(done, timeout=timeout, what=f"{self.name}: write")

    def delete_positions(self, positions: list[TxnPosition]) -> None:
        """Delete records from the cursor: whole entries, or single records of a batch (batch-index delete)."""
        if positions:
            # Lazily persisted (the maintenance sweep flushes it): a position lost in a crash only makes recovery
            # replay records of transactions that already ended, which it discards.
            self.cursor.delete_many([(p.position, p.ack_set()) for p in positions], persist=False)

    def update_writer_config(self, config: BufferedWriterConfig) -> None:
        self.writer_config = config
        self.writer.update_config(config)

    # -- replay ------------------------------------------------------------------------------
    def replay(self, older: str | None = None) -> Iterator[ReplayedRecord]:
        """Every live record after the mark-delete position, skipping records already deleted. ``older`` is the
        version of a replaying broker without PIP-160's reader: a batched entry stops the replay (older_brokers)."""
        for pos, payload in self.ledger.entries_after(self.cursor.mark_delete_position, 100):
            if self.cursor.is_deleted(pos):
                continue
            try:
                decoded = decode_entry(payload, "txn-log")
            except EntryDecodeError:
                # Pulsar skips what it cannot deserialize; we do the same and keep going.
                continue
            refuse_batched(decoded, self.name, pos, older)
            records = cast(list[TransactionMetadataEntry], decoded.records)  # the "txn-log" kind's type
            size = len(records)
            if size == 0:
                continue
            if size == 1 and not decoded.batched:
                yield ReplayedRecord(records[0], TxnPosition(pos.ledger_id, pos.entry_id, 1, 0))
                continue
            remaining = self.cursor.deleted_batch_indexes(pos)
            for index, record in enumerate(records):
                if remaining is not None and not has_bit(remaining, index):
                    continue  # this record of the batch was already deleted
                yield ReplayedRecord(record, TxnPosition(pos.ledger_id, pos.entry_id, size, index))

    def close(self) -> None:
        self.writer.close()
        self.ledger.close()
