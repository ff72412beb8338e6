"""Topics, subscriptions and a minimal transaction buffer.

Message entries are framed like Pulsar's so that topic ledgers look like real ones to the scan:
``0E 01`` (the CRC32C checksum magic), CRC32C of the rest, int32 metadata size, metadata, payload.
The metadata here is a small JSON object (the engine has no MessageMetadata protobuf); commit and
abort markers are entries whose metadata carries ``marker``.
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass
from typing import Optional

import google_crc32c

from .managed_ledger import ManagedCursor, ManagedLedger, ManagedLedgerFactory
from .pending_ack import managed_ledger_name
from .position import Position

MESSAGE_MAGIC = b"\x0e\x01"
COMMIT_MARKER = "TXN_COMMIT"
ABORT_MARKER = "TXN_ABORT"


def encode_message(metadata: dict, payload: bytes) -> bytes:
    meta = json.dumps(metadata, separators=(",", ":")).encode()
    body = struct.pack(">I", len(meta)) + meta + payload
    return MESSAGE_MAGIC + struct.pack(">I", google_crc32c.value(body)) + body


def decode_message(entry: bytes) -> tuple[dict, bytes]:
    if entry[:2] != MESSAGE_MAGIC or len(entry) < 10:
        raise ValueError("not a message entry")
    (crc,) = struct.unpack_from(">I", entry, 2)
    body = entry[6:]
    if google_crc32c.value(body) != crc:
        raise ValueError("message checksum mismatch")
    (size,) = struct.unpack_from(">I", body, 0)
    return json.loads(body[4 : 4 + size]), body[4 + size :]


def normalize_topic(name: str) -> str:
    """``x`` → persistent://public/default/x; ``t/ns/x`` → persistent://t/ns/x (pulsar-admin's rules)."""
    if "://" in name:
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{name}"
    if len(parts) == 3:
        return f"persistent://{name}"
    raise ValueError(f"Invalid short topic name '{name}', it should be in the format of <tenant>/<namespace>/<topic> or <topic>")


@dataclass
class Message:
    position: Position
    payload: bytes
    txn: Optional[tuple[int, int]]


class TransactionBuffer:
    """Per topic: ongoing transactions, aborted ones with their marker, and the max read position."""

    def __init__(self, ledger: ManagedLedger):
        self.ledger = ledger
        self.ongoing: dict[tuple[int, int], Position] = {}
        self.aborted: dict[tuple[int, int], Position] = {}
        self.committed_count = 0
        self.state = "None"
        self.recover_start_time = 0
        self.recover_end_time = 0
        self.last_snapshot_timestamp = 0

    def max_read_position(self) -> Position:
        last = self.ledger.last_confirmed_entry
        if self.ongoing:
            first = min(self.ongoing.values())
            return Position(first.ledger_id, first.entry_id - 1)
        return last

    def on_message(self, txn, pos: Position) -> None:
        if txn is not None and txn not in self.ongoing:
            self.ongoing[txn] = pos

    def on_marker(self, txn, commit: bool, pos: Position) -> None:
        self.ongoing.pop(txn, None)
        if commit:
            self.committed_count += 1
        else:
            self.aborted[txn] = pos

    def trim_aborted(self) -> None:
        """Forget aborted transactions whose marker's ledger has been trimmed away."""
        live = {info.ledger_id for info in self.ledger.ledgers()}
        for txn, pos in list(self.aborted.items()):
            if pos.ledger_id not in live:
                del self.aborted[txn]

    def stats(self, low_water_marks: dict[int, int] | None = None) -> dict:
        out = {"state": self.state, "maxReadPosition": str(self.max_read_position()),
               "lastSnapshotTimestamps": self.last_snapshot_timestamp}
        if low_water_marks is not None:
            out["lowWaterMarks"] = {str(k): v for k, v in low_water_marks.items()}
        out.update({"ongoingTxnSize": len(self.ongoing), "recoverStartTime": self.recover_start_time,
                    "recoverEndTime": self.recover_end_time, "snapshotType": "Single",
                    "totalAbortedTransactions": len(self.aborted)})
        return out


class Topic:
    def __init__(self, factory: ManagedLedgerFactory, name: str, ml_config):
        self.name = normalize_topic(name)
        self.ledger = factory.open(managed_ledger_name(self.name), ml_config)
        self.buffer = TransactionBuffer(self.ledger)
        self._lock = threading.RLock()
        self._dispatch: dict[str, Position] = {}

    # -- subscriptions -----------------------------------------------------------------------
    def subscription(self, name: str) -> ManagedCursor:
        return self.ledger.open_cursor(name)

    def subscriptions(self) -> list[str]:
        return sorted(self.ledger.cursors())

    # -- produce -----------------------------------------------------------------------------
    def publish(self, payload: bytes, txn: Optional[tuple[int, int]] = None) -> Position:
        meta = {"txn": list(txn)} if txn else {}
        with self._lock:
            pos = self.ledger.add_entry(encode_message(meta, payload))
            self.buffer.on_message(txn, pos)
        return pos

    def end_transaction(self, txn: tuple[int, int], commit: bool) -> Position:
        """Write the commit/abort marker (idempotent per transaction end, like Pulsar's TB)."""
        marker = COMMIT_MARKER if commit else ABORT_MARKER
        with self._lock:
            pos = self.ledger.add_entry(encode_message({"txn": list(txn), "marker": marker}, b""))
            self.buffer.on_marker(txn, commit, pos)
        return pos

    # -- consume -----------------------------------------------------------------------------
    def receive(self, subscription: str, max_messages: int) -> list[Message]:
        """Committed messages after the subscription's last delivered one, up to the max read position."""
        cursor = self.subscription(subscription)
        with self._lock:
            start = self._dispatch.get(subscription)
            if start is None:
                md = cursor.mark_delete_position
                start = Position(md.ledger_id, md.entry_id + 1)
            limit = self.buffer.max_read_position()
            out: list[Message] = []
            while len(out) < max_messages:
                batch = self.ledger.read_entries(start, max(16, max_messages))
                if not batch:
                    break
                for pos, entry in batch:
                    if pos > limit:
                        self._dispatch[subscription] = start
                        return out
                    start = Position(pos.ledger_id, pos.entry_id + 1)
                    meta, payload = decode_message(entry)
                    txn = tuple(meta["txn"]) if "txn" in meta else None
                    if "marker" in meta or (txn is not None and txn in self.buffer.aborted) or cursor.is_deleted(pos):
                        cursor.delete(pos)  # markers and aborted messages are acknowledged for the reader
                        continue
                    out.append(Message(pos, payload, txn))
                    if len(out) >= max_messages:
                        break
            self._dispatch[subscription] = start
            return out

    def redeliver(self, subscription: str) -> None:
        """Forget what was dispatched (after an abort releases acks, the messages come again)."""
        with self._lock:
            self._dispatch.pop(subscription, None)

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, clock_ms) -> None:
        self.buffer.state = "Initializing"
        self.buffer.recover_start_time = clock_ms()
        ledgers = self.ledger.ledgers()
        start = Position(ledgers[0].ledger_id, -1) if ledgers else Position(-1, -1)
        for pos, entry in self.ledger.entries_after(start, 500):
            try:
                meta, _ = decode_message(entry)
            except ValueError:
                continue
            if "txn" not in meta:
                continue
            txn = tuple(meta["txn"])
            if "marker" in meta:
                self.buffer.on_marker(txn, meta["marker"] == COMMIT_MARKER, pos)
            else:
                self.buffer.on_message(txn, pos)
        self.buffer.state = "Ready"
        self.buffer.recover_end_time = clock_ms()

    def close(self) -> None:
        self.ledger.close()
