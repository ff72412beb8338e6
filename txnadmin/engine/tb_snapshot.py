"""Transaction-buffer snapshots: Pulsar's two aborted-transaction processors and the snapshot service.

A topic's transaction buffer remembers every aborted transaction (with the position of its abort
marker) so readers never see aborted messages. The *processor* keeps that set and persists it:

* :class:`SingleSnapshotProcessor` (``transactionBufferSegmentedSnapshotEnabled=false``): the whole
  set plus the max read position, as one value keyed by the topic in the namespace's
  ``__transaction_buffer_snapshot`` log. Every snapshot rewrites everything.
* :class:`SegmentedSnapshotProcessor` (``true``, PIP-196): aborted ids are sealed into immutable
  segments of a fixed capacity in ``__transaction_buffer_snapshot_segments`` (key
  ``multiple-<sequenceId>-<topic>``); the per-topic index list plus the unsealed tail go to
  ``__transaction_buffer_snapshot_indexes``. A snapshot rewrites only the index and the tail.

Beyond Pulsar (which loads every segment at recovery and keeps every aborted id in memory), the
segmented processor can load segments on demand into a bounded cache. The abort check stays exact:
a message at position p of transaction T can only be hidden by T's abort marker, which comes after
p, so only segments whose last marker is after p — and whose recorded id range holds T — can hold T.

The :class:`SnapshotService` owns a namespace's snapshot logs. With the shared reader on, every
topic of a namespace reads the log through one table view, so a namespace's log is read once per
engine rather than once per topic (the seed proposal's ``readNext(topic)``; Pulsar shipped the same
idea as ``TableView.readLatest(topic)``).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .keyed_log import KeyedLog, PositionedLog, scan_latest
from ..names import managed_ledger_name, namespace_of, topic_in
from .managed_ledger import ManagedLedgerFactory
from .position import Position
from .snapshot_metrics import SnapshotMetrics

SNAPSHOT_TOPIC = "__transaction_buffer_snapshot"
SEGMENTS_TOPIC = "__transaction_buffer_snapshot_segments"
INDEXES_TOPIC = "__transaction_buffer_snapshot_indexes"
SNAPSHOT_SYSTEM_TOPICS = (SNAPSHOT_TOPIC, SEGMENTS_TOPIC, INDEXES_TOPIC)

Txn = tuple[int, int]


class SnapshotError(Exception):
    """A transaction buffer snapshot that cannot be read as recorded."""


def _crash_point(name: str) -> None:
    """Fault injection for the crash tests: ``TXNADMIN_CRASH_POINT=<name>`` kills the process here."""
    if os.environ.get("TXNADMIN_CRASH_POINT") == name:
        os._exit(137)


def segment_capacity(segment_size: int, topic: str) -> int:
    """Aborted ids per sealed segment, as Pulsar derives it from ``transactionBufferSnapshotSegmentSize``."""
    return max(1, (segment_size - 8 - len(topic)) // 3)


def segment_key(sequence_id: int, topic: str) -> str:
    return f"multiple-{sequence_id}-{topic}"


def _pos_json(prefix: str, pos: Position) -> dict:
    return {f"{prefix}LedgerId": pos.ledger_id, f"{prefix}EntryId": pos.entry_id}


# -- the snapshot service ----------------------------------------------------------------------
class SnapshotService:
    """The namespace snapshot logs of one engine, created on first write, read shared or privately.

    ``recovery_reads`` counts entries read to answer recovery lookups, per system topic.
    """

    def __init__(self, factory: ManagedLedgerFactory, ml_config: Callable[[], Any], shared_reader: bool = True,
                 metrics: Optional[SnapshotMetrics] = None):
        self.factory = factory
        self.metrics = metrics or SnapshotMetrics()
        self.ml_config = ml_config
        self.shared_reader = shared_reader
        self.recovery_reads: Counter = Counter()
        self._keyed: dict[str, KeyedLog] = {}
        self._positioned: dict[str, PositionedLog] = {}
        self._lock = threading.Lock()  # one log object per name, whichever topic's thread asks first

    @staticmethod
    def ledger_name(namespace: str, local: str) -> str:
        return managed_ledger_name(topic_in(namespace, local))

    def exists(self, namespace: str, local: str) -> bool:
        name = self.ledger_name(namespace, local)
        return name in self._keyed or name in self._positioned or self.factory.exists(name)

    def keyed(self, namespace: str, local: str) -> KeyedLog:
        name = self.ledger_name(namespace, local)
        with self._lock:
            log = self._keyed.get(name)
            if log is None:
                log = self._keyed[name] = KeyedLog(self.factory, name, self.ml_config(), compact_every=1000,
                                                   lazy=True, retain_values=False)
            return log

    def segments(self, namespace: str) -> PositionedLog:
        name = self.ledger_name(namespace, SEGMENTS_TOPIC)
        with self._lock:
            log = self._positioned.get(name)
            if log is None:
                log = self._positioned[name] = PositionedLog(self.factory, name, self.ml_config())
            return log

    def read_latest(self, namespace: str, local: str, topic: str) -> Optional[Any]:
        if not self.exists(namespace, local):
            return None
        log = self.keyed(namespace, local)
        if self.shared_reader:
            before = log.entries_read
            value = log.take(topic)  # the topic keeps its state; the shared view need not
            self.recovery_reads[local] += log.entries_read - before
        else:
            value, read = scan_latest(log, topic)
            self.recovery_reads[local] += read
        return value

    def write(self, namespace: str, local: str, topic: str, value: Any) -> int:
        """Write ``value`` for ``topic``; returns the bytes appended."""
        log = self.keyed(namespace, local)
        before = log.bytes_written
        log.put(topic, value)
        return log.bytes_written - before

    def has(self, namespace: str, local: str, topic: str) -> bool:
        """Whether ``topic`` has a value in the log (for stats; reads only what is new)."""
        return self.exists(namespace, local) and self.keyed(namespace, local).contains(topic)

    def peek(self, namespace: str, local: str, topic: str) -> Optional[Any]:
        """The latest value through the shared table view (not counted as recovery)."""
        return self.keyed(namespace, local).get(topic) if self.exists(namespace, local) else None

    def _logs(self) -> list:
        with self._lock:
            return list(self._keyed.values()) + list(self._positioned.values())

    def managed_ledgers(self) -> list:
        return [log.ledger for log in self._logs()]

    def close(self) -> None:
        for log in self._logs():
            log.close()
        with self._lock:
            self._keyed.clear()
            self._positioned.clear()


# -- processors --------------------------------------------------------------------------------
class _Processor:
    snapshot_type = ""

    def __init__(self, topic: str, service: SnapshotService, clock_ms: Callable[[], int],
                 snapshot_position: Callable[[], Position]):
        self.topic = topic
        self.namespace = namespace_of(topic)
        self.service = service
        self.clock_ms = clock_ms
        self.snapshot_position = snapshot_position  # a max read position consistent with what we hold
        self.last_snapshot_timestamp = 0
        self.bytes_written = 0  # snapshot bytes this processor appended (for the benchmark and stats)

    def finish_recovery(self) -> None:
        """Called once the topic's replay is done (the segmented processor seals what it left over)."""

    def segment_count(self) -> int:
        return 0

    def _internal(self, local: str, metadata: bool) -> dict:
        log = self.service.keyed(self.namespace, local) if local != SEGMENTS_TOPIC else self.service.segments(self.namespace)
        return {"managedLedgerName": log.name, "managedLedgerInternalStats": log.ledger.internal_stats(metadata)}


class SingleSnapshotProcessor(_Processor):
    """One snapshot per topic holding every aborted transaction (Pulsar's default)."""

    snapshot_type = "Single"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.aborts: dict[Txn, Position] = {}  # in marker order

    def put_aborted(self, txn: Txn, marker: Position) -> None:
        self.aborts.setdefault(txn, marker)

    def is_aborted(self, txn: Txn, read_position: Optional[Position] = None) -> bool:
        return txn in self.aborts

    def aborted_count(self) -> int:
        return len(self.aborts)

    def trim_expired(self, first_live_ledger: int) -> int:
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

    def take_snapshot(self) -> None:
        mrp = self.snapshot_position()
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
                "singleSnapshotSystemTopicInternalStats": self._internal(SNAPSHOT_TOPIC, metadata)}


@dataclass
class SegmentIndex:
    sequence_id: int
    marker: Position  # abort marker of the segment's last transaction
    segment: Position  # where the segment entry sits in the segments log
    last_txn: Txn
    count: int
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # TC id → (min, max) least bits

    def to_json(self) -> dict:
        # Pulsar's Index fields, plus three of ours that let the abort check skip segments unread.
        return {"sequenceID": self.sequence_id,
                "abortedMarkLedgerID": self.marker.ledger_id, "abortedMarkEntryID": self.marker.entry_id,
                "segmentLedgerID": self.segment.ledger_id, "segmentEntryID": self.segment.entry_id,
                "lastTxnID": list(self.last_txn), "abortedTxnCount": self.count,
                "txnIdRanges": {str(k): list(v) for k, v in sorted(self.ranges.items())}}

    @classmethod
    def from_json(cls, item: dict) -> "SegmentIndex":
        return cls(item["sequenceID"], Position(item["abortedMarkLedgerID"], item["abortedMarkEntryID"]),
                   Position(item["segmentLedgerID"], item["segmentEntryID"]), tuple(item["lastTxnID"]),
                   item["abortedTxnCount"], {int(k): tuple(v) for k, v in item["txnIdRanges"].items()})

    def may_hold(self, txn: Txn) -> bool:
        span = self.ranges.get(txn[0])
        return span is not None and span[0] <= txn[1] <= span[1]


class SegmentedSnapshotProcessor(_Processor):
    """PIP-196: sealed segments plus an index; optionally loads segments on demand (bounded cache)."""

    snapshot_type = "Segment"

    def __init__(self, *args, capacity: int, on_demand: bool = True, cache_segments: int = 4, **kwargs):
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self.on_demand = on_demand
        self.cache_segments = max(1, cache_segments)
        self.unsealed: dict[Txn, Position] = {}
        self.indexes: list[SegmentIndex] = []
        self._markers: list[Position] = []  # indexes' markers, for bisect
        self.sealed: dict[Txn, int] = {}  # every sealed id → sequence (only without on-demand loading)
        self._cache: OrderedDict[int, frozenset] = OrderedDict()
        self.next_sequence_id = 0
        self.last_abort_marker = Position(-1, -1)
        self.last_segment_timestamp = 0
        self.segments_loaded = 0
        self._index_stale = False  # segments were dropped during recovery and the stored index still lists them

    # -- writing -------------------------------------------------------------------------------
    def put_aborted(self, txn: Txn, marker: Position) -> None:
        if marker <= self.last_abort_marker or txn in self.unsealed:
            return  # replayed after a snapshot that already holds it
        self.unsealed[txn] = marker
        self.last_abort_marker = marker
        if self._seal_while_full():
            self._write_index()

    def _seal_while_full(self) -> bool:
        """Seal segments while the tail holds a full one; the caller writes the index once after."""
        sealed_any = False
        while len(self.unsealed) >= self.capacity:
            self._seal()
            sealed_any = True
        return sealed_any

    def _seal(self) -> None:
        items = []
        for txn, marker in self.unsealed.items():
            items.append((txn, marker))
            if len(items) == self.capacity:
                break
        last_txn, last_marker = items[-1]
        seq = self.next_sequence_id
        value = {"topicName": self.topic, "sequenceId": seq, **_pos_json("persistentPosition", last_marker),
                 "aborts": [[t[0], t[1]] for t, _ in items]}
        log = self.service.segments(self.namespace)
        before = log.bytes_written
        try:
            pos = log.put(segment_key(seq, self.topic), value)
        except Exception:
            self.service.metrics.segment("add", ok=False)
            raise
        self.service.metrics.segment("add")
        self.bytes_written += log.bytes_written - before
        _crash_point("after-segment-write")
        ranges: dict[int, tuple[int, int]] = {}
        for (most, least), _ in items:
            lo, hi = ranges.get(most, (least, least))
            ranges[most] = (min(lo, least), max(hi, least))
        index = SegmentIndex(seq, last_marker, pos, last_txn, len(items), ranges)
        self.indexes.append(index)
        self._markers.append(last_marker)
        ids = frozenset(t for t, _ in items)
        for txn in ids:
            del self.unsealed[txn]
        if self.on_demand:
            self._remember(seq, ids)
        else:
            self.sealed.update((t, seq) for t in ids)
        self.next_sequence_id = seq + 1
        self.last_segment_timestamp = self.clock_ms()

    def _write_index(self) -> None:
        mrp = self.snapshot_position()
        value = {"topicName": self.topic, "indexList": [i.to_json() for i in self.indexes],
                 "snapshot": {"topicName": self.topic, "sequenceId": self.next_sequence_id,
                              **_pos_json("maxReadPosition", mrp),
                              "aborts": [[t[0], t[1], p.ledger_id, p.entry_id] for t, p in self.unsealed.items()]}}
        try:
            written = self.service.write(self.namespace, INDEXES_TOPIC, self.topic, value)
        except Exception:
            self.service.metrics.index("add", ok=False)
            raise
        self.service.metrics.index("add")
        self.service.metrics.index_entry_bytes.observe(written)
        self.bytes_written += written
        self.last_snapshot_timestamp = self.clock_ms()

    def take_snapshot(self) -> None:
        self._write_index()

    # -- reading -------------------------------------------------------------------------------
    def _remember(self, seq: int, ids: frozenset) -> None:
        self._cache[seq] = ids
        self._cache.move_to_end(seq)
        while len(self._cache) > self.cache_segments:
            self._cache.popitem(last=False)

    def _load(self, index: SegmentIndex) -> frozenset:
        ids = self._cache.get(index.sequence_id)
        if ids is not None:
            self._cache.move_to_end(index.sequence_id)
            return ids
        try:
            key, value = self.service.segments(self.namespace).read(index.segment)
        except KeyError:
            self.service.metrics.segment("read", ok=False)
            raise
        self.service.metrics.segment("read")
        if key != segment_key(index.sequence_id, self.topic):
            raise SnapshotError(f"{self.topic}: segment at {index.segment} is {key!r}, "
                                f"expected {segment_key(index.sequence_id, self.topic)!r}")
        self.segments_loaded += 1
        ids = frozenset((a[0], a[1]) for a in value["aborts"])
        if self.on_demand:
            self._remember(index.sequence_id, ids)
        return ids

    def is_aborted(self, txn: Txn, read_position: Optional[Position] = None) -> bool:
        if txn in self.unsealed:
            return True
        if not self.on_demand:
            return txn in self.sealed
        # T's abort marker comes after any of T's messages: skip segments that end before the message.
        start = 0 if read_position is None else bisect.bisect_right(self._markers, read_position)
        for index in self.indexes[start:]:
            if index.may_hold(txn) and txn in self._load(index):
                return True
        return False

    def aborted_count(self) -> int:
        return sum(i.count for i in self.indexes) + len(self.unsealed)

    # -- trimming ------------------------------------------------------------------------------
    def trim_expired(self, first_live_ledger: int) -> int:
        """Drop segments whose last abort marker's ledger was trimmed from the topic; tombstone them."""
        dropped = self._drop_expired(first_live_ledger)
        if dropped:
            self._write_index()
        return dropped

    def _drop_expired(self, first_live_ledger: int) -> int:
        dropped = 0
        while self.indexes and self.indexes[0].marker.ledger_id < first_live_ledger:
            index = self.indexes.pop(0)
            self._markers.pop(0)
            self._cache.pop(index.sequence_id, None)
            if not self.on_demand:
                for txn in [t for t, s in self.sealed.items() if s == index.sequence_id]:
                    del self.sealed[txn]
            self.service.segments(self.namespace).put(segment_key(index.sequence_id, self.topic), None)
            self.service.metrics.segment("del")
            dropped += 1
        return dropped

    # -- recovery ------------------------------------------------------------------------------
    def recover(self, first_live_ledger: int) -> Optional[Position]:
        value = self.service.read_latest(self.namespace, INDEXES_TOPIC, self.topic)
        if value is None:
            return self._upgrade_from_single(first_live_ledger)
        self.service.metrics.index("read")
        snap = value["snapshot"]
        for item in value["indexList"]:
            index = SegmentIndex.from_json(item)
            self.indexes.append(index)
            self._markers.append(index.marker)
        for most, least, ledger_id, entry_id in snap["aborts"]:
            self.unsealed[(most, least)] = Position(ledger_id, entry_id)
        self.next_sequence_id = max([snap.get("sequenceId", 0)] + [i.sequence_id + 1 for i in self.indexes])
        markers = self._markers + list(self.unsealed.values())
        self.last_abort_marker = max(markers) if markers else Position(-1, -1)
        if not self.on_demand:  # Pulsar: every segment is read back at recovery
            for index in list(self.indexes):
                try:
                    ids = self._load(index)
                except KeyError:
                    if index.marker.ledger_id < first_live_ledger:
                        continue  # trimmed meanwhile; trim_expired below drops the index
                    raise SnapshotError(f"{self.topic}: cannot read snapshot segment {index.sequence_id} "
                                        f"at {index.segment}") from None
                self.sealed.update((t, index.sequence_id) for t in ids)
        # No index write here: the replay start is only known once this returns, so finish_recovery writes it.
        self._index_stale = self._drop_expired(first_live_ledger) > 0
        return Position(snap["maxReadPositionLedgerId"], snap["maxReadPositionEntryId"])

    def _upgrade_from_single(self, first_live_ledger: int) -> Optional[Position]:
        """No index yet: start from the topic's single snapshot, if one exists (its aborts become unsealed)."""
        value = self.service.read_latest(self.namespace, SNAPSHOT_TOPIC, self.topic)
        if value is None:
            return None
        for most, least, ledger_id, entry_id in value["aborts"]:
            if ledger_id >= first_live_ledger:
                self.unsealed[(most, least)] = Position(ledger_id, entry_id)
        if self.unsealed:
            self.last_abort_marker = max(self.unsealed.values())
        mrp = value["maxReadPosition"]
        return Position(mrp["ledgerId"], mrp["entryId"])

    def finish_recovery(self) -> None:
        """Seal what an upgrade or a replay left over capacity and record segments dropped at recovery: index
        writes wait until the replay is done, when the buffer can name a replay start that holds."""
        if self._seal_while_full() or self._index_stale:
            self._write_index()
        self._index_stale = False

    def segment_count(self) -> int:
        return len(self.indexes)

    # -- stats ---------------------------------------------------------------------------------
    def has_snapshot(self) -> bool:
        return self.service.has(self.namespace, INDEXES_TOPIC, self.topic)

    def segments_stats(self, detailed: bool) -> dict:
        out = {"segmentsSize": len(self.indexes), "currentSegmentCapacity": self.capacity,
               "unsealedAbortTxnIDSize": len(self.unsealed),
               "lastTookSnapshotSegmentTimestamp": self.last_segment_timestamp}
        if detailed:
            out["segmentStats"] = [{"lastTxnID": f"({i.last_txn[0]},{i.last_txn[1]})",
                                    "persistentPosition": str(i.marker)} for i in self.indexes]
        return out

    def internal_stats(self, metadata: bool) -> dict:
        return {"snapshotType": self.snapshot_type,
                "segmentInternalStats": self._internal(SEGMENTS_TOPIC, metadata),
                "segmentIndexInternalStats": self._internal(INDEXES_TOPIC, metadata)}


def make_processor(config, service: SnapshotService, topic: str, clock_ms, snapshot_position):
    """The processor ``transactionBufferSegmentedSnapshotEnabled`` selects (read when the topic opens)."""
    if config.transactionBufferSegmentedSnapshotEnabled:
        return SegmentedSnapshotProcessor(
            topic, service, clock_ms, snapshot_position,
            capacity=segment_capacity(config.transactionBufferSnapshotSegmentSize, topic),
            on_demand=config.engineTransactionBufferSegmentsOnDemand,
            cache_segments=config.engineTransactionBufferSegmentCacheSize)
    return SingleSnapshotProcessor(topic, service, clock_ms, snapshot_position)
