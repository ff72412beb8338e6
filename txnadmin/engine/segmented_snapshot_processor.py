"""PIP-196's aborted-transaction processor (``transactionBufferSegmentedSnapshotEnabled=true``).

Aborted ids are sealed into immutable segments of a fixed capacity in the namespace's
``__transaction_buffer_snapshot_segments`` log (key ``multiple-<sequenceId>-<topic>``); the per-topic index
list plus the unsealed tail go to ``__transaction_buffer_snapshot_indexes``. A snapshot rewrites only the
index and the tail.

Beyond Pulsar (which loads every segment at recovery and keeps every aborted id in memory), segments can
be loaded on demand into a bounded cache. The abort check stays exact: a message at position p of
transaction T can only be hidden by T's abort marker, which comes after p, so only segments whose last
marker is after p — and whose recorded id range holds T — can hold T.
"""

from __future__ import annotations

import bisect
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

from ..names import INDEXES_TOPIC, SEGMENTS_TOPIC, SNAPSHOT_TOPIC
from .aborted_txn_processor import SnapshotPosition, Txn
from .position import Position
from .tb_snapshot import SnapshotError, SnapshotProcessorBase, segment_key


def _crash_point(name: str) -> None:
    """Fault injection for the crash tests: ``TXNADMIN_CRASH_POINT=<name>`` kills the process here."""
    if os.environ.get("TXNADMIN_CRASH_POINT") == name:
        os._exit(137)


def _pos_json(prefix: str, pos: Position) -> dict:
    return {f"{prefix}LedgerId": pos.ledger_id, f"{prefix}EntryId": pos.entry_id}


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


class SegmentedSnapshotProcessor(SnapshotProcessorBase):
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
    def put_aborted(self, txn: Txn, marker: Position, snapshot_position: SnapshotPosition) -> None:
        # The topic hands markers over in log order, but this does not lean on it: an older marker is not proof of a
        # replay, so only a transaction this processor already holds is skipped (a replay after a snapshot).
        if txn in self.unsealed or (marker <= self.last_abort_marker and self._sealed_holds(txn)):
            return
        self.unsealed[txn] = marker
        self.last_abort_marker = max(self.last_abort_marker, marker)
        if self._seal_while_full():
            self._write_index(snapshot_position)

    def _sealed_holds(self, txn: Txn) -> bool:
        if not self.on_demand:
            return txn in self.sealed
        return any(index.may_hold(txn) and txn in self._load(index) for index in self.indexes)

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
        last_txn = items[-1][0]
        # The newest marker in this segment or any before it: the abort check skips a segment whose marker is before
        # a message, which is only sound if no member's marker is newer (kept even though markers come in log order).
        last_marker = max([m for _, m in items] + self._markers[-1:])
        seq = self.next_sequence_id
        value = {"topicName": self.topic, "sequenceId": seq, **_pos_json("persistentPosition", last_marker),
                 "aborts": [[t[0], t[1]] for t, _ in items]}
        log = self.service.segments(self.namespace)
        before = log.bytes_written
        try:
            pos = log.put(segment_key(seq, self.topic), value)
        except Exception:
            self.service.metrics.segment("add", self.namespace, self.topic, ok=False)
            raise
        self.service.metrics.segment("add", self.namespace, self.topic)
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

    def _write_index(self, snapshot_position: SnapshotPosition) -> None:
        mrp = snapshot_position()
        value = {"topicName": self.topic, "indexList": [i.to_json() for i in self.indexes],
                 "snapshot": {"topicName": self.topic, "sequenceId": self.next_sequence_id,
                              **_pos_json("maxReadPosition", mrp),
                              "aborts": [[t[0], t[1], p.ledger_id, p.entry_id] for t, p in self.unsealed.items()]}}
        try:
            written = self.service.write(self.namespace, INDEXES_TOPIC, self.topic, value)
        except Exception:
            self.service.metrics.index("add", self.namespace, self.topic, ok=False)
            raise
        self.service.metrics.index("add", self.namespace, self.topic)
        self.service.metrics.index_entry(self.namespace, self.topic, written)
        self.bytes_written += written
        self.last_snapshot_timestamp = self.clock_ms()

    def take_snapshot(self, snapshot_position: SnapshotPosition) -> None:
        self._write_index(snapshot_position)

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
            self.service.metrics.segment("read", self.namespace, self.topic, ok=False)
            raise
        self.service.metrics.segment("read", self.namespace, self.topic)
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
    def trim_expired(self, first_live_ledger: int, snapshot_position: SnapshotPosition) -> int:
        """Drop segments whose last abort marker's ledger was trimmed from the topic; tombstone them."""
        dropped = self._drop_expired(first_live_ledger)
        if dropped:
            self._write_index(snapshot_position)
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
            self.service.metrics.segment("del", self.namespace, self.topic)
            dropped += 1
        return dropped

    # -- recovery ------------------------------------------------------------------------------
    def recover(self, first_live_ledger: int) -> Optional[Position]:
        value = self.service.read_latest(self.namespace, INDEXES_TOPIC, self.topic)
        if value is None:
            return self._upgrade_from_single(first_live_ledger)
        self.service.metrics.index("read", self.namespace, self.topic)
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

    def finish_recovery(self, snapshot_position: SnapshotPosition) -> None:
        """Seal what an upgrade or a replay left over capacity and record segments dropped at recovery: index
        writes wait until the replay is done, when the buffer can name a replay start that holds."""
        if self._seal_while_full() or self._index_stale:
            self._write_index(snapshot_position)
        self._index_stale = False

    def segment_count(self) -> int:
        return len(self.indexes)

    # -- stats ---------------------------------------------------------------------------------
    def has_snapshot(self) -> bool:
        return self.service.has(self.namespace, INDEXES_TOPIC, self.topic)

    def segments_stats(self, detailed: bool) -> dict:
        out: dict[str, Any] = {"segmentsSize": len(self.indexes), "currentSegmentCapacity": self.capacity,
                               "unsealedAbortTxnIDSize": len(self.unsealed),
                               "lastTookSnapshotSegmentTimestamp": self.last_segment_timestamp}
        if detailed:
            out["segmentStats"] = [{"lastTxnID": f"({i.last_txn[0]},{i.last_txn[1]})",
                                    "persistentPosition": str(i.marker)} for i in self.indexes]
        return out

    def internal_stats(self, metadata: bool) -> dict:
        return {"snapshotType": self.snapshot_type,
                "segmentInternalStats": self.service.internal_stats(self.namespace, SEGMENTS_TOPIC, metadata),
                "segmentIndexInternalStats": self.service.internal_stats(self.namespace, INDEXES_TOPIC, metadata)}
