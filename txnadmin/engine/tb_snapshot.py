"""Transaction-buffer snapshots: the namespace snapshot logs both aborted-transaction processors write.

A topic's transaction buffer keeps its aborted transactions through a processor
(:mod:`.aborted_txn_processor`); both persist into the namespace's system topics named here:

* ``__transaction_buffer_snapshot``: the single processor's one value per topic;
* ``__transaction_buffer_snapshot_segments`` and ``__transaction_buffer_snapshot_indexes``: the segmented
  processor's sealed segments and its per-topic index (PIP-196).

The :class:`SnapshotService` owns a namespace's snapshot logs. With the shared reader on, every
topic of a namespace reads the log through one table view, so a namespace's log is read once per
engine rather than once per topic (the seed proposal's ``readNext(topic)``; Pulsar shipped the same
idea as ``TableView.readLatest(topic)``).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable, Optional

from ..names import SEGMENTS_TOPIC, managed_ledger_name, namespace_of, topic_in
from .aborted_txn_processor import SnapshotPosition
from .keyed_log import KeyedLog, PositionedLog, scan_latest
from .managed_ledger import ManagedLedgerFactory
from .snapshot_metrics import SnapshotMetrics


class SnapshotError(Exception):
    """A transaction buffer snapshot that cannot be read as recorded."""


def segment_capacity(segment_size: int, topic: str) -> int:
    """Aborted ids per sealed segment, as Pulsar derives it from ``transactionBufferSnapshotSegmentSize``."""
    return max(1, (segment_size - 8 - len(topic)) // 3)


def segment_key(sequence_id: int, topic: str) -> str:
    return f"multiple-{sequence_id}-{topic}"


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

    def internal_stats(self, namespace: str, local: str, metadata: bool) -> dict:
        """One snapshot system topic's managed-ledger internal stats, as buffer-snapshot-internal-stats nests them."""
        log = self.segments(namespace) if local == SEGMENTS_TOPIC else self.keyed(namespace, local)
        return {"managedLedgerName": log.name, "managedLedgerInternalStats": log.ledger.internal_stats(metadata)}

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


# -- what both processors share ----------------------------------------------------------------
class SnapshotProcessorBase:
    """The topic a processor serves, the service holding its logs, and the defaults of a processor without
    segments. The processors themselves: :mod:`.single_snapshot_processor`, :mod:`.segmented_snapshot_processor`."""

    snapshot_type = ""

    def __init__(self, topic: str, service: SnapshotService, clock_ms: Callable[[], int]):
        self.topic = topic
        self.namespace = namespace_of(topic)
        self.service = service
        self.clock_ms = clock_ms
        self.last_snapshot_timestamp = 0
        self.bytes_written = 0  # snapshot bytes this processor appended (for the benchmark and stats)

    def finish_recovery(self, snapshot_position: SnapshotPosition) -> None:
        """Nothing to do by default (the segmented processor seals what the replay left over)."""

    def segment_count(self) -> int:
        return 0
