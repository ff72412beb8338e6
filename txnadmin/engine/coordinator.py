"""Transaction coordinators (Pulsar's MLTransactionMetadataStore), one per transaction log.

A coordinator keeps every live transaction in memory with the log positions of all its records;
the terminal UPDATE deletes them all from the log's cursor, so ledgers trim exactly as in Pulsar —
and a transaction left open pins its NEW record, and with it every ledger from there on.
"""

from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..codec import Subscription, TransactionMetadataEntry, TxnOp, TxnStatus
from .buffered_writer import TxnPosition
from .completion import Completion, Pending
from .coordinator_metrics import CoordinatorCounters
from .ops import Op, run as run_op
from .transaction_log import TransactionLog

STATUS_NAMES = {v: k for k, v in TxnStatus.items()}
OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED = (
    TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.COMMITTED, TxnStatus.ABORTING, TxnStatus.ABORTED,
)
TERMINAL = (COMMITTED, ABORTED)
# Read once: each attribute of a protobuf enum wrapper is a Python-level lookup, and the hot paths use them per record.
OP_NEW, OP_ADD_PARTITION, OP_ADD_SUBSCRIPTION, OP_UPDATE = (
    TxnOp.NEW, TxnOp.ADD_PARTITION, TxnOp.ADD_SUBSCRIPTION, TxnOp.UPDATE,
)


class CoordinatorError(Exception):
    """Base of the coordinator's errors (Pulsar's CoordinatorException); the admin layer maps them to HTTP."""


class TransactionNotFound(CoordinatorError):
    """No such transaction in this coordinator."""


class InvalidTxnStatus(CoordinatorError):
    """A status change the transaction's current status does not allow."""


class CoordinatorNotReady(CoordinatorError):
    """The coordinator is not loaded (yet)."""


def can_transition(current: int, new: int) -> bool:
    """Pulsar's TransactionUtil.canTransitionTo."""
    if current == OPEN:
        return new not in TERMINAL
    if current == COMMITTING:
        return new in (COMMITTING, COMMITTED)
    if current == ABORTING:
        return new in (ABORTING, ABORTED)
    return new == current


@dataclass
class TxnMeta:
    tc_id: int
    seq: int
    status: int
    open_timestamp: int
    timeout_ms: int
    owner: str | None = None
    produced_partitions: list[str] = field(default_factory=list)
    acked_partitions: list[tuple[str, str]] = field(default_factory=list)
    positions: list[TxnPosition] = field(default_factory=list)
    last_modified: int = 0
    # Serialises status changes of one transaction without holding up the others' log writes.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Held by the broker role across a whole end-transaction (status, markers, final record).
    end_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # The ADD_PARTITION / ADD_SUBSCRIPTION record of each partition (topic name) and subscription ((topic,
    # subscription)) registered by this process, keyed as in produced/acked_partitions: what a send or an ack
    # waits for before it reaches the topic or the pending-ack store (a record recovered from the log is durable).
    registrations: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def txn_id(self) -> tuple[int, int]:
        return (self.tc_id, self.seq)

    @property
    def status_name(self) -> str:
        return STATUS_NAMES[self.status]

    def __str__(self) -> str:
        return f"({self.tc_id},{self.seq})"


class TransactionCoordinator:
    """One TC: recovery from its log, the transaction lifecycle, timeouts, stats."""

    def __init__(self, tc_id: int, log: TransactionLog, clock_ms: Callable[[], int] | None = None,
                 on_timeout: Callable[[int, int], None] | None = None):
        self.tc_id = tc_id
        self.log = log
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.on_timeout = on_timeout
        self.state = "None"
        self.txns: dict[int, TxnMeta] = {}
        self.recover_start_time = 0
        self.recover_end_time = 0
        self._lock = threading.RLock()
        self._deadlines: list[tuple[int, int]] = []  # (deadline ms, seq)
        self.counters = CoordinatorCounters()  # since this coordinator loaded, as a broker's store counts

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, older: str | None = None) -> list[TxnMeta]:
        """Replay the log; returns transactions left COMMITTING/ABORTING, which the caller drives to the end. On a
        broker without PIP-160's reader (``older``, its version) a batched entry raises BatchedEntryUnreadable and
        the coordinator stays Initializing, never ready, as Pulsar 2.10's store does."""
        with self._lock:
            self.state = "Initializing"
            self.recover_start_time = self.clock_ms()
            self.log.recover_max_local_txn_id()
            stale: list[TxnPosition] = []
            for item in self.log.replay(older):
                rec, pos = item.record, item.position
                seq = rec.txnid_least_bits
                if rec.HasField("max_local_txn_id"):
                    self.log.raise_max_local_txn_id(rec.max_local_txn_id)
                if rec.metadata_op == OP_NEW:
                    self.txns[seq] = TxnMeta(
                        self.tc_id, seq, OPEN, rec.start_time, rec.timeout_ms,
                        rec.owner if rec.HasField("owner") else None, positions=[pos],
                        last_modified=rec.last_modification_time,
                    )
                    continue
                meta = self.txns.get(seq)
                if meta is None:
                    stale.append(pos)  # a record of a transaction that already ended
                    continue
                meta.positions.append(pos)
                meta.last_modified = rec.last_modification_time
                if rec.metadata_op == OP_ADD_PARTITION:
                    _extend_unique(meta.produced_partitions, rec.partitions)
                elif rec.metadata_op == OP_ADD_SUBSCRIPTION:
                    _extend_unique(meta.acked_partitions, [(s.topic, s.subscription) for s in rec.subscriptions])
                elif rec.metadata_op == OP_UPDATE:
                    meta.status = rec.new_status
                    if rec.new_status in TERMINAL:
                        stale.extend(meta.positions)
                        del self.txns[seq]
            self.log.delete_positions(stale)
            for meta in self.txns.values():
                if meta.status == OPEN:
                    heapq.heappush(self._deadlines, (meta.open_timestamp + meta.timeout_ms, meta.seq))
            self.state = "Ready"
            self.recover_end_time = self.clock_ms()
            return [m for m in self.txns.values() if m.status in (COMMITTING, ABORTING)]

    # -- lifecycle ---------------------------------------------------------------------------
    def _ready(self) -> None:
        if self.state != "Ready":
            raise CoordinatorNotReady(f"Transaction coordinator {self.tc_id} is not ready (state {self.state})")

    def _record(self, op: TxnOp, seq: int, **fields) -> TransactionMetadataEntry:
        return TransactionMetadataEntry(
            metadata_op=op, txnid_most_bits=self.tc_id, txnid_least_bits=seq,
            last_modification_time=self.clock_ms(), max_local_txn_id=self.log.max_local_txn_id, **fields,
        )

    def new_transaction(self, timeout_ms: int, owner: str | None = None) -> TxnMeta:
        return run_op(self.new_transaction_async(timeout_ms, owner))

    def new_transaction_async(self, timeout_ms: int, owner: str | None = None) -> Op:
        """:meth:`new_transaction` as an operation (see :mod:`.ops`): its NEW record queued, then awaited."""
        with self._lock:
            self._ready()
            seq = self.log.next_local_txn_id()
            now = self.clock_ms()
            extra = {"owner": owner} if owner else {}
            rec = self._record(OP_NEW, seq, timeout_ms=timeout_ms, start_time=now, **extra)
        pos = yield self.log.append_pending(rec)
        self.counters.appended()
        self.counters.created_one()
        with self._lock:
            meta = TxnMeta(self.tc_id, seq, OPEN, now, timeout_ms, owner, positions=[pos], last_modified=now)
            self.txns[seq] = meta
            heapq.heappush(self._deadlines, (now + timeout_ms, seq))
            return meta

    def get(self, seq: int) -> TxnMeta:
        with self._lock:
            meta = self.txns.get(seq)
        if meta is None:
            raise TransactionNotFound(f"The transaction ({self.tc_id},{seq}) not found")
        return meta

    def add_produced_partitions(self, seq: int, partitions: list[str]) -> None:
        self._add_async(seq, OP_ADD_PARTITION, partitions=partitions)()

    def add_acked_subscriptions(self, seq: int, subscriptions: list[tuple[str, str]]) -> None:
        subs = [Subscription(topic=t, subscription=s) for t, s in subscriptions]
        self._add_async(seq, OP_ADD_SUBSCRIPTION, subscriptions=subs)()

    def register_partition(self, seq: int, partition: str) -> Callable[[], object]:
        """What a client's send waits for before its message reaches ``partition`` (Pulsar's client waits for its
        addPublishPartitionToTxn): the partition's ADD_PARTITION record durable. The first send to a partition
        writes it; the others wait for the same record."""
        return self._register(seq, partition, OP_ADD_PARTITION)

    def register_subscription(self, seq: int, topic: str, subscription: str) -> Callable[[], object]:
        """As :meth:`register_partition`, for an ack's ADD_SUBSCRIPTION record (addSubscriptionToTxn)."""
        return self._register(seq, (topic, subscription), OP_ADD_SUBSCRIPTION)

    def _register(self, seq: int, key, op: TxnOp) -> Callable[[], object]:
        meta = self.get(seq)
        with meta.lock:
            wait = meta.registrations.get(key)
            if wait is not None:
                return wait
            known = meta.produced_partitions if op == OP_ADD_PARTITION else meta.acked_partitions
            if key in known:  # recovered from the log: durable already
                return _durable
            if op == OP_ADD_PARTITION:
                return self._add_queued(meta, op, partitions=[key])
            return self._add_queued(meta, op, subscriptions=[Subscription(topic=key[0], subscription=key[1])])

    def _add_async(self, seq: int, op: TxnOp, **fields) -> Callable[[], object]:
        meta = self.get(seq)
        with meta.lock:
            return self._add_queued(meta, op, **fields)

    def _add_queued(self, meta: TxnMeta, op: TxnOp, **fields) -> Callable[[], object]:
        """Queue an ADD_* record (under the transaction's lock); the returned function waits until it is durable.

        The transaction knows the partitions from the moment the record is queued: an end queues its COMMITTING
        record after this one (it takes the same lock to change the status), so the log holds them in that order,
        and the end reads the partitions only once COMMITTING is durable, that is, once this record is too. The
        record's position is kept in its write callback, which runs before that of any record queued after it,
        so the terminal UPDATE deletes it with the rest even if nobody waits for it."""
        with self._lock:
            self._ready()
            if meta.status != OPEN or self.txns.get(meta.seq) is not meta:
                raise InvalidTxnStatus(
                    f"Expect Txn {meta} to be in OPEN status but it is in {meta.status_name} status"
                )
            rec = self._record(op, meta.seq, **fields)
            meta.last_modified = rec.last_modification_time
            if op == OP_ADD_PARTITION:
                keys = list(fields["partitions"])
                _extend_unique(meta.produced_partitions, keys)
            else:
                keys = [(s.topic, s.subscription) for s in fields["subscriptions"]]
                _extend_unique(meta.acked_partitions, keys)
        done = Completion()
        positions = meta.positions

        def logged(pos: TxnPosition | None, exc: BaseException | None) -> None:
            if pos is not None:
                positions.append(pos)
                self.counters.appended()
            done(pos, exc)

        wait = Pending(done, timeout=30, what=f"{self.log.name}: write")
        for key in keys:
            meta.registrations.setdefault(key, wait)
        self.log.append(rec, logged)
        return wait

    def update_status(self, seq: int, new_status: int, expected: int) -> TxnMeta:
        """Pulsar's updateTxnStatus: current must equal ``expected``; no-op when already ``new_status``."""
        return run_op(self.update_status_async(seq, new_status, expected))

    def update_status_async(self, seq: int, new_status: int, expected: int) -> Op:
        """:meth:`update_status` as an operation (see :mod:`.ops`). The transaction's lock is held until the record
        is durable, as before: a status change of one transaction waits for the one before it."""
        with self.get(seq).lock:
            return (yield from self._update_locked(seq, new_status, expected))

    def _update_locked(self, seq: int, new_status: int, expected: int) -> Op:
        with self._lock:
            self._ready()
            meta = self.get(seq)
            if meta.status == new_status:
                return meta
            if meta.status != expected or not can_transition(meta.status, new_status):
                raise InvalidTxnStatus(
                    f"Expect Txn {meta} to be in {STATUS_NAMES[expected]} status but it is in {meta.status_name} status"
                )
            rec = self._record(OP_UPDATE, seq, expected_status=expected, new_status=new_status)
        pos = yield self.log.append_pending(rec)
        self.counters.appended()
        with self._lock:
            meta.positions.append(pos)
            meta.status = new_status
            meta.last_modified = rec.last_modification_time
            ended = new_status in TERMINAL
            if ended:
                self.txns.pop(seq, None)
        if ended:
            self.counters.ended(new_status == COMMITTED, self.clock_ms() - meta.open_timestamp)
        if ended:
            # Outside the coordinator lock: the cursor update waits for a metadata sync, which the ends of
            # other transactions share instead of queueing behind it.
            self.log.delete_positions(meta.positions)
        return meta

    # -- timeouts ----------------------------------------------------------------------------
    def forget_timeout(self, seq: int) -> None:
        """Drop ``seq``'s timeout from the timer (the log keeps it): only the fault verbs do this, to reproduce the
        coordinator that lost its timeouts in apache/pulsar#19200. Recovery arms it again from the log."""
        with self._lock:
            self._deadlines = [(deadline, s) for deadline, s in self._deadlines if s != seq]
            heapq.heapify(self._deadlines)

    def expired(self, now_ms: int | None = None) -> list[int]:
        """Sequences of OPEN transactions whose timeout has passed (each reported once)."""
        now = self.clock_ms() if now_ms is None else now_ms
        out = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, seq = heapq.heappop(self._deadlines)
                meta = self.txns.get(seq)
                if meta is not None and meta.status == OPEN:
                    out.append(seq)
        return out

    # -- stats -------------------------------------------------------------------------------
    def low_water_mark(self) -> int:
        with self._lock:
            return (min(self.txns) - 1) if self.txns else 0

    def stats(self) -> dict:
        with self._lock:
            return {
                "state": self.state,
                "leastSigBits": self.log.max_local_txn_id,
                "lowWaterMark": self.low_water_mark(),
                "ongoingTxnSize": len(self.txns),
                "recoverStartTime": self.recover_start_time,
                "recoverEndTime": self.recover_end_time,
            }

    def internal_stats(self, metadata: bool = False) -> dict:
        return {"transactionLogStats": {
            "managedLedgerName": self.log.name,
            "managedLedgerInternalStats": self.log.ledger.internal_stats(metadata),
        }}

    def snapshot(self) -> list[TxnMeta]:
        with self._lock:
            return list(self.txns.values())

    def close(self) -> None:
        with self._lock:
            self.state = "Closing"
        self.log.close()
        self.state = "Close"


def _durable() -> None:
    """The wait of a registration that is durable already."""


def _extend_unique(target: list, items) -> None:
    for item in items:
        if item not in target:
            target.append(item)
