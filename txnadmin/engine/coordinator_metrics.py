"""A coordinator's transaction counters, as Pulsar's MLTransactionMetadataStore keeps them (TransactionMetadataStoreStats).

Counters live with the coordinator, so a reload or restart starts them at zero as a broker's do. The broker
exports them through TransactionAggregator as gauges labelled ``cluster`` and ``coordinator_id``:
``pulsar_txn_{created,committed,aborted,timeout,append_log}_total``, ``pulsar_txn_active_count`` and the
``pulsar_txn_execution_latency_le_*`` buckets. The latency buckets are StatsBuckets: each holds the transactions
that ended (COMMITTED/ABORTED) since the previous exposition with an open-to-end time up to its bound in
milliseconds (above the previous bound), and every exposition empties them.
"""

from __future__ import annotations

import bisect
import threading

# TransactionMetadataStoreStats' execution-latency bounds, in milliseconds; one more bucket holds the overflow.
LATENCY_BOUNDS_MS = (10, 20, 50, 100, 500, 1000, 5000, 15000, 30000, 60000, 300000, 1500000, 3000000)
LATENCY_NAMES = tuple(f"pulsar_txn_execution_latency_le_{b}" for b in LATENCY_BOUNDS_MS) + (
    "pulsar_txn_execution_latency_le_overflow",)
# (exported name, attribute) in TransactionAggregator's order
COUNTER_NAMES = (
    ("pulsar_txn_committed_total", "committed"),
    ("pulsar_txn_aborted_total", "aborted"),
    ("pulsar_txn_created_total", "created"),
    ("pulsar_txn_timeout_total", "timeout"),
    ("pulsar_txn_append_log_total", "append_log"),
)


class CoordinatorCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.created = 0
        self.committed = 0
        self.aborted = 0
        self.timeout = 0
        self.append_log = 0
        self._latency = [0] * len(LATENCY_NAMES)

    def appended(self) -> None:
        """One record of the coordinator's log written (any op)."""
        with self._lock:
            self.append_log += 1

    def created_one(self) -> None:
        with self._lock:
            self.created += 1

    def timed_out(self) -> None:
        with self._lock:
            self.timeout += 1

    def ended(self, committed: bool, open_ms: int) -> None:
        """A transaction reached COMMITTED/ABORTED ``open_ms`` after it opened."""
        slot = bisect.bisect_left(LATENCY_BOUNDS_MS, open_ms)  # the first bound ≥ the latency, as StatsBuckets does
        with self._lock:
            if committed:
                self.committed += 1
            else:
                self.aborted += 1
            self._latency[slot] += 1

    def take_latency(self) -> list[int]:
        """The latency buckets since the previous call, emptied (StatsBuckets.refresh at each exposition)."""
        with self._lock:
            out, self._latency = self._latency, [0] * len(LATENCY_NAMES)
        return out
