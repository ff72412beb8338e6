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
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

import google_crc32c

from .aborted_txn_processor import AbortedTxnProcessor
from .completion import Completion, Pending
from ..names import managed_ledger_name, normalize_topic
from .managed_ledger import ManagedCursor, ManagedLedger, ManagedLedgerFactory
from .ops import Op, run as run_op
from .position import Position

MESSAGE_MAGIC = b"\x0e\x01"
COMMIT_MARKER = "TXN_COMMIT"
ABORT_MARKER = "TXN_ABORT"


def encode_message(metadata: dict, payload: bytes) -> bytes:
    meta = _metadata_json(metadata)
    body = struct.pack(">I", len(meta)) + meta + payload
    return MESSAGE_MAGIC + struct.pack(">I", google_crc32c.value(body)) + body


def _metadata_json(metadata: dict) -> bytes:
    """``json.dumps(metadata, separators=(",", ":"))``, byte for byte; the two shapes every transactional send and
    marker writes are formatted directly (json's encoder was ~5 % of the workload's CPU)."""
    txn = metadata.get("txn")
    if type(txn) is list and len(txn) == 2 and type(txn[0]) is int and type(txn[1]) is int:
        if len(metadata) == 1:
            return b'{"txn":[%d,%d]}' % (txn[0], txn[1])
        marker = metadata.get("marker")
        if len(metadata) == 2 and marker in (COMMIT_MARKER, ABORT_MARKER) and next(iter(metadata)) == "txn":
            return b'{"txn":[%d,%d],"marker":"%s"}' % (txn[0], txn[1], marker.encode())
    return json.dumps(metadata, separators=(",", ":")).encode()


def decode_message(entry: bytes) -> tuple[dict, bytes]:
    if entry[:2] != MESSAGE_MAGIC or len(entry) < 10:
        raise ValueError("not a message entry")
    (crc,) = struct.unpack_from(">I", entry, 2)
    body = entry[6:]
    if google_crc32c.value(body) != crc:
        raise ValueError("message checksum mismatch")
    (size,) = struct.unpack_from(">I", body, 0)
    return json.loads(body[4 : 4 + size]), body[4 + size :]


class TransactionBufferNotReady(Exception):
    """Pulsar's ServiceUnitNotReadyException from a transaction buffer that has not finished recovering: retriable."""


# Pulsar's client gives up on a send after sendTimeoutMs (30 s by default); a transactional send to a buffer that
# is still recovering waits at most that long here, so a stalled buffer cannot hold a producer's thread forever.
SEND_TIMEOUT_S = 30.0


@dataclass
class Message:
    position: Position
    payload: bytes
    txn: Optional[tuple[int, int]]


class TransactionBuffer:
    """Per topic: ongoing transactions, the max read position, and the aborted set (via its processor).

    ``processor`` keeps the aborted set and its snapshots (:mod:`.aborted_txn_processor`); the buffer tells
    it where a snapshot may say replay resumes (:meth:`snapshot_position`). A snapshot is taken after
    ``snapshot_every`` markers, or by
    :meth:`maybe_snapshot` once ``snapshot_min_ms`` passed with changes pending (Pulsar's
    ``transactionBufferSnapshotMaxTransactionCount`` and ``transactionBufferSnapshotMinTimeInMillis``).
    """

    def __init__(self, ledger: ManagedLedger, processor: AbortedTxnProcessor, snapshot_every: int = 1000,
                 snapshot_min_ms: int = 5000):
        self.ledger = ledger
        self.processor = processor
        self.snapshot_every = snapshot_every
        self.snapshot_min_ms = snapshot_min_ms
        self.ongoing: dict[tuple[int, int], Position] = {}
        # The smallest position in ``ongoing``, or None when not known (computed on demand): the max read position
        # is asked for at every receive, and scanning every ongoing transaction each time cost ~2 % of the workload.
        self._first_ongoing: Optional[Position] = None
        self.state = "None"
        self.recover_start_time = 0
        self.recover_end_time = 0
        self.replay_start: Optional[Position] = None
        self.changes = 0  # markers since the last snapshot
        # What a buffer whose recovery has not ended reports as its max read position: the last confirmed entry
        # when the topic loaded (Pulsar sets it so before recovering, and ignores publishes until Ready).
        self.max_read_at_load: Optional[Position] = None

    def dispatch_limit(self) -> Position:
        """How far consumers may read: nowhere until the buffer is Ready (Pulsar's getMaxReadPosition answers
        EARLIEST while it recovers), then the max read position."""
        if self.state != "Ready":
            return Position(-1, -1)
        return self.max_read_position()

    def max_read_position(self) -> Position:
        last = self.ledger.last_confirmed_entry
        if self.ongoing:
            first = self._first_ongoing
            if first is None:
                first = self._first_ongoing = min(self.ongoing.values())
            return Position(first.ledger_id, first.entry_id - 1)
        return last

    def snapshot_position(self) -> Position:
        """While replaying, where the replay started (what we hold is only whole from there); else max read."""
        if self.state != "Ready" and self.replay_start is not None:
            return self.replay_start
        return self.max_read_position()

    def on_message(self, txn, pos: Position) -> None:
        if txn is not None and txn not in self.ongoing:
            self.ongoing[txn] = pos
            if self._first_ongoing is not None and pos < self._first_ongoing:
                self._first_ongoing = pos

    def on_marker(self, txn, commit: bool, pos: Position) -> None:
        ended = self.ongoing.pop(txn, None)
        if ended is not None and ended == self._first_ongoing:
            self._first_ongoing = None  # the oldest ended: the next max read position looks again
        if ended is None:
            # Already ended: a coordinator that recovers a COMMITTING/ABORTING transaction drives the end
            # again and writes a second marker. (Nor is anything left to hide for a transaction whose
            # messages were all trimmed.) Recording it twice would double-count it in a segment.
            return
        if not commit:
            self.processor.put_aborted(txn, pos, self.snapshot_position)
        if self.state == "Ready":
            self.changes += 1
            if self.changes >= self.snapshot_every:
                self.take_snapshot()

    def is_aborted(self, txn, position: Optional[Position] = None) -> bool:
        return self.processor.is_aborted(txn, position)

    def take_snapshot(self) -> None:
        self.processor.take_snapshot(self.snapshot_position)
        self.changes = 0

    def maybe_snapshot(self, now_ms: int) -> bool:
        if self.changes and now_ms - self.processor.last_snapshot_timestamp >= self.snapshot_min_ms:
            self.take_snapshot()
            return True
        return False

    def first_live_ledger(self) -> int:
        return self.ledger.first_ledger_id

    def trim_expired(self) -> int:
        """Forget aborted transactions whose marker's ledger has been trimmed away."""
        return self.processor.trim_expired(self.first_live_ledger(), self.snapshot_position)

    def stats(self, low_water_marks: dict[int, int] | None = None, segment_stats: bool = False) -> dict:
        max_read = self.max_read_at_load if self.state != "Ready" and self.max_read_at_load is not None else self.max_read_position()
        out = {"state": self.state, "maxReadPosition": str(max_read),
               "lastSnapshotTimestamps": self.processor.last_snapshot_timestamp}
        if low_water_marks is not None:
            out["lowWaterMarks"] = {str(k): v for k, v in low_water_marks.items()}
        out.update({"ongoingTxnSize": len(self.ongoing), "recoverStartTime": self.recover_start_time,
                    "recoverEndTime": self.recover_end_time, "snapshotType": self.processor.snapshot_type,
                    "totalAbortedTransactions": self.processor.aborted_count()})
        segments = self.processor.segments_stats(segment_stats)
        if segments is not None:
            out["segmentsStats"] = segments
        return out


class _DurableMarker:
    """A marker on disk whose end the buffer has yet to apply; ``error`` is what applying it raised, if anything."""
    __slots__ = ("txn", "commit", "pos", "error")

    def __init__(self, txn, commit: bool):
        self.txn, self.commit = txn, commit
        self.pos: Optional[Position] = None
        self.error: Optional[BaseException] = None


class Topic:
    def __init__(self, factory: ManagedLedgerFactory, name: str, ml_config, processor: AbortedTxnProcessor,
                 snapshot_every: int = 1000, snapshot_min_ms: int = 5000):
        """``processor`` keeps this topic's aborted transactions (made for its full name)."""
        self.name = normalize_topic(name)
        self.ledger = factory.open(managed_ledger_name(self.name), ml_config)
        self.buffer = TransactionBuffer(self.ledger, processor, snapshot_every, snapshot_min_ms)
        self._lock = threading.RLock()
        self._dispatch: dict[str, Position] = {}
        # Markers made durable, in entry order (the storage calls adds back in the order they were queued), whose end
        # the buffer has not applied yet. Appended on the storage's callback thread, drained under the topic lock.
        self._durable_markers: deque[_DurableMarker] = deque()
        # Set once the transaction buffer is Ready (or the topic closes): transactional sends wait for it.
        self._ready = threading.Event()
        self._ready_done = Completion()  # completed with _ready, once: what a parked send waits for
        self._ready_lock = threading.Lock()
        self._closed = False
        # Ends applied since the topic loaded (TopicTransactionBuffer's txnCommittedCounter/txnAbortedCounter)
        self.txn_committed = 0
        self.txn_aborted = 0
        # Producers connected to this topic, as a broker keeps them per connection: gone when the topic unloads.
        self._publishers: dict[str, dict] = {}
        self._next_producer_id = 0

    # -- producers ---------------------------------------------------------------------------
    def attach_producer(self, name: str, client_version: str, address: str = "/127.0.0.1:0") -> None:
        """A producer connects, naming its client as a client names itself on connect (``Pulsar-Java-v4.0.13``)."""
        with self._lock:
            self._publishers[name] = {"producerId": self._next_producer_id, "producerName": name,
                                      "accessMode": "Shared", "address": address, "clientVersion": client_version,
                                      "connectedSince": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      "metadata": {}}
            self._next_producer_id += 1

    def detach_producer(self, name: str) -> None:
        with self._lock:
            self._publishers.pop(name, None)

    def publisher_stats(self) -> list[dict]:
        with self._lock:
            return [dict(p) for p in self._publishers.values()]

    # -- subscriptions -----------------------------------------------------------------------
    def subscription(self, name: str) -> ManagedCursor:
        return self.ledger.open_cursor(name)

    def subscriptions(self) -> list[str]:
        return sorted(self.ledger.cursors())

    # -- produce -----------------------------------------------------------------------------
    def _submit(self, entry: bytes, txn: Optional[tuple[int, int]],
                marker: Optional[_DurableMarker] = None) -> Pending:
        """Queue the entry under the topic lock (so entries keep the order their callers got it in); the returned
        function waits for it to be durable, without the lock: producers of one topic pipeline their adds and
        share group commits, as a broker's do, instead of each waiting out the previous one's sync.

        A ``marker`` joins the durable-marker queue in the add's callback, before its waiter is released: the
        callbacks come in entry order, so the queue holds markers in log order whichever waiter wakes first."""
        done = Completion()
        callback: Callable[[Optional[Position], Optional[BaseException]], None] = done
        if marker is not None:
            queue = self._durable_markers

            def queue_then_release(pos: Optional[Position], exc: Optional[BaseException]) -> None:
                if exc is None:
                    marker.pos = pos
                    queue.append(marker)
                done(pos, exc)

            callback = queue_then_release
        with self._lock:
            pos = self.ledger.add_entry_async(entry, callback)
            if pos is not None and txn is not None:
                # Ongoing from the moment its first message has a place: the max read position stops before it
                # even while it is still being written.
                self.buffer.on_message(txn, pos)

        def position(_value: object) -> Position:
            assert pos is not None  # a refused add fails its completion, so result() raised
            return pos

        return Pending(done, position, timeout=-1, what=f"{self.name}: add")

    def _add(self, entry: bytes, txn: Optional[tuple[int, int]]) -> Position:
        return self._submit(entry, txn)()

    def publish(self, payload: bytes, txn: Optional[tuple[int, int]] = None) -> Position:
        return self.publish_async(payload, txn)()

    def publish_async(self, payload: bytes, txn: Optional[tuple[int, int]] = None) -> Callable[[], Position]:
        """Queue a message; the returned function waits until it is durable and gives its position."""
        meta = {"txn": list(txn)} if txn else {}
        return self._submit(encode_message(meta, payload), txn)

    def end_transaction(self, txn: tuple[int, int], commit: bool) -> Position:
        """Write the commit/abort marker (idempotent per transaction end, like Pulsar's TB).

        The buffer learns of the end only once the marker is durable, so no reader sees the transaction's
        messages as committed (or hidden as aborted) on the strength of a marker a crash could still lose.
        """
        return self.end_transaction_async(txn, commit)()

    def _set_ready(self) -> None:
        """Release every send waiting for the buffer (recovered, or the topic closed): both may happen."""
        with self._ready_lock:
            if self._ready.is_set():
                return
            self._ready.set()
        self._ready_done(None, None)

    def wait_ready(self, timeout_s: float = SEND_TIMEOUT_S) -> None:
        """Before a transactional send: wait until the buffer has recovered, as Pulsar's buffer holds sends that
        arrive while it is Initializing and releases them when recovery completes (or fails them when the topic
        closes); the wait is bounded by the client's send timeout."""
        run_op(self.wait_ready_async(timeout_s))

    def wait_ready_async(self, timeout_s: float = SEND_TIMEOUT_S) -> Op:
        """:meth:`wait_ready` as an operation (see :mod:`.ops`): a driver running many clients parks this one's
        send instead of blocking all of them behind a buffer that may stay Initializing for the whole timeout."""
        if self._ready.is_set() and not self._closed:
            return
        try:
            yield Pending(self._ready_done, timeout=timeout_s, what=f"{self.name}: transaction buffer")
        except TimeoutError:
            pass  # said below, as the buffer's state
        if self._closed:
            raise TransactionBufferNotReady(f"{self.name}: Topic is closed")
        if not self._ready.is_set():
            raise TransactionBufferNotReady(
                f"{self.name}: transaction buffer still {self.buffer.state} after {timeout_s:g} s (send timed out)")

    def end_transaction_async(self, txn: tuple[int, int], commit: bool) -> Pending:
        """Queue the marker; the returned function waits for it and then ends the transaction in the buffer.

        A buffer still recovering refuses the end at once, retriably: Pulsar's buffer parks a commit or abort until
        it is Ready, so the transaction stays COMMITTING/ABORTING; the engine's coordinator retries failed ends
        every second instead of parking a thread on the buffer, and the operator sees the same state."""
        if not self._ready.is_set():
            raise TransactionBufferNotReady(
                f"{self.name}: transaction buffer is {self.buffer.state}, not Ready; the end is retried")
        kind = COMMIT_MARKER if commit else ABORT_MARKER
        marker = _DurableMarker(txn, commit)
        wait = self._submit(encode_message({"txn": list(txn), "marker": kind}, b""), None, marker)

        def finish(_value: object) -> Position:
            pos = wait()  # done already: only the position
            # Not just our marker: every durable one up to it, in log order (Pulsar's buffer applies each in its add
            # callback, which a managed ledger completes in entry order). Ours is queued before wait() returns, so it
            # is applied when this returns, by us or by a later end's waiter that woke first.
            self._apply_durable_markers()
            if marker.error is not None:
                raise marker.error
            return pos

        return Pending(wait.completion, finish, timeout=-1, what=f"{self.name}: add")

    def _apply_durable_markers(self) -> None:
        """Apply the queued durable markers to the buffer, oldest first. Not on the storage's callback thread: a
        marker may take a snapshot, whose write waits for a callback of that very thread."""
        with self._lock:
            queue = self._durable_markers
            while queue:
                marker = queue[0]  # taken off only once handled: an interrupt leaves it for the next drain
                assert marker.pos is not None  # only queued once its add succeeded
                try:
                    self.buffer.on_marker(marker.txn, marker.commit, marker.pos)
                except Exception as exc:  # noqa: BLE001 — the marker's own waiter raises it (and the end is retried)
                    marker.error = exc
                else:
                    if marker.commit:
                        self.txn_committed += 1
                    else:
                        self.txn_aborted += 1
                queue.popleft()

    # -- consume -----------------------------------------------------------------------------
    def receive(self, subscription: str, max_messages: int) -> list[Message]:
        """Committed messages after the subscription's last delivered one, up to the max read position."""
        cursor = self.subscription(subscription)
        with self._lock:
            start = self._dispatch.get(subscription)
            if start is None:
                md = cursor.mark_delete_position
                start = Position(md.ledger_id, md.entry_id + 1)
            limit = self.buffer.dispatch_limit()
            out: list[Message] = []
            acked_for_reader: list[Position] = []
            while len(out) < max_messages:
                # a few more than asked for: markers and aborted messages sit between the ones delivered
                batch = self.ledger.read_entries(start, max_messages + 4)
                if not batch:
                    break
                stop = False
                for pos, entry in batch:
                    if pos > limit:
                        stop = True
                        break
                    start = Position(pos.ledger_id, pos.entry_id + 1)
                    if cursor.is_deleted(pos):
                        # Acknowledged already (a message, or a marker or aborted message acknowledged for the
                        # reader): nothing to deliver or acknowledge, so not decoded. After a redelivery the scan
                        # restarts at the mark-delete and passes many of these.
                        continue
                    meta, payload = decode_message(entry)
                    txn = tuple(meta["txn"]) if "txn" in meta else None
                    if "marker" in meta or (txn is not None and self.buffer.is_aborted(txn, pos)):
                        acked_for_reader.append(pos)  # markers and aborted messages are acknowledged for the reader
                        continue
                    out.append(Message(pos, payload, txn))
                    if len(out) >= max_messages:
                        break
                if stop:
                    break
            self._dispatch[subscription] = start
        if acked_for_reader:
            # one cursor update for the lot, outside the topic lock
            # not persisted at once: a marker or aborted message whose delete is lost is skipped again after a restart
            cursor.delete_many([(p, None) for p in acked_for_reader], persist=False)
        return out

    def redeliver(self, subscription: str) -> None:
        """Forget what was dispatched (after an abort releases acks, the messages come again)."""
        with self._lock:
            self._dispatch.pop(subscription, None)

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, clock_ms) -> None:
        """Latest snapshot, then replay of the topic from the snapshot's max read position."""
        buffer = self.buffer
        buffer.state = "Initializing"
        buffer.recover_start_time = clock_ms()
        first_live = buffer.first_live_ledger()
        start = buffer.processor.recover(first_live)
        if start is None:
            start = Position(first_live, -1)
        buffer.replay_start = start
        for pos, entry in self.ledger.entries_after(start, 500):
            try:
                meta, _ = decode_message(entry)
            except ValueError:
                continue
            if "txn" not in meta:
                continue
            txn = tuple(meta["txn"])
            if "marker" in meta:
                buffer.on_marker(txn, meta["marker"] == COMMIT_MARKER, pos)
            else:
                buffer.on_message(txn, pos)
        buffer.processor.finish_recovery(buffer.snapshot_position)
        buffer.state = "Ready"
        buffer.recover_end_time = clock_ms()
        self._set_ready()

    def start_stalled_recovery(self, clock_ms) -> None:
        """Start the buffer's recovery and never finish it: Pulsar's buffer when its snapshot reader or replay
        blocks (apache/pulsar#17040). The topic answers stats; transactional sends wait (:meth:`wait_ready`), ends
        are refused retriably, consumers are given nothing, and plain publishes are stored without moving the max
        read position. Only unloading the topic (a new recovery) or closing it ends the state."""
        buffer = self.buffer
        buffer.state = "Initializing"
        buffer.recover_start_time = clock_ms()
        buffer.recover_end_time = 0
        buffer.max_read_at_load = self.ledger.last_confirmed_entry

    def buffer_stats(self, low_water_marks=None, segment_stats: bool = False) -> dict:
        with self._lock:
            return self.buffer.stats(low_water_marks, segment_stats)

    def transaction_in_buffer(self, txn) -> tuple[Optional[Position], bool]:
        """(first message position if still ongoing, aborted?) — under the topic lock, as reads mutate the cache."""
        with self._lock:
            start = self.buffer.ongoing.get(txn)
            return start, self.buffer.is_aborted(txn, start)

    def snapshot_tick(self, now_ms: int) -> bool:
        if not self.buffer.changes or not self._ready.is_set():
            return False  # nothing to write (read without the lock: a change racing this waits for the next tick)
        with self._lock:
            return self.buffer.maybe_snapshot(now_ms)

    def trim_expired_aborts(self) -> int:
        if not self._ready.is_set():
            return 0  # nothing recovered to trim (a Pulsar buffer trims only on markers it applies)
        with self._lock:
            return self.buffer.trim_expired()

    def close(self) -> None:
        # Waiting senders fail with "Topic is closed", as Pulsar fails the sends its buffer parked.
        self._closed = True
        self._set_ready()
        self.ledger.close()
