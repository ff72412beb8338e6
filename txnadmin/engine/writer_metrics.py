"""Metrics of the batched log writers, with the names, buckets and label Pulsar implements.

One instance per component (coordinator logs or pending-ack stores) on the engine's own registry,
shared by every writer of that component, as Pulsar shares one per broker.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

RECORD_BUCKETS = (10, 50, 100, 200, 500, 1000)
SIZE_BUCKETS = (128, 512, 1024, 2048, 4096, 16384, 102400, 1232896)
DELAY_BUCKETS = (1, 5, 10)
TRIGGERS = ("max_records", "max_size", "max_delay", "large_data")


class BufferedWriterMetrics:
    def __init__(self, prefix: str, registry: CollectorRegistry, broker: str = "127.0.0.1:8080"):
        self.prefix = prefix
        self.broker = broker
        labels = ["broker"]
        base = f"{prefix}_bufferedwriter"
        self.batch_records = Histogram(f"{base}_batch_records", "Records per flushed batch", labels,
                                       buckets=RECORD_BUCKETS, registry=registry).labels(broker)
        self.batch_size_bytes = Histogram(f"{base}_batch_size_bytes", "Bytes of records per flushed batch", labels,
                                          buckets=SIZE_BUCKETS, registry=registry).labels(broker)
        self.oldest_record_delay = Histogram(
            f"{base}_batch_oldest_record_delay_seconds", "Delay of the oldest record of a batch at flush", labels,
            buckets=DELAY_BUCKETS, registry=registry).labels(broker)
        self._triggers = {
            t: Counter(f"{base}_flush_trigger_{t}", f"Flushes triggered by {t.replace('_', ' ')}", labels,
                       registry=registry).labels(broker)
            for t in TRIGGERS
        }
        self._counts = dict.fromkeys(TRIGGERS, 0)

    def flushed(self, trigger: str, records: int, size_bytes: int, oldest_delay_ms: float) -> None:
        self._triggers[trigger].inc()
        self._counts[trigger] += 1
        self.batch_records.observe(records)
        self.batch_size_bytes.observe(size_bytes)
        # Pulsar observes milliseconds / 1000.0 against buckets 1, 5, 10.
        self.oldest_record_delay.observe(oldest_delay_ms / 1000.0)

    def flush_counts(self) -> dict[str, int]:
        return dict(self._counts)


def broker_writer_metrics(registry: CollectorRegistry, broker: str,
                          has_writer: bool) -> tuple[BufferedWriterMetrics, BufferedWriterMetrics]:
    """One broker's transaction-log and pending-ack writer metrics, in ``registry``. A release before PIP-160
    (2.11, ``has_writer`` False) has no batched writer, so its /metrics has none of these series: they are kept in
    a registry nobody exports."""
    writers = registry if has_writer else CollectorRegistry()
    return (BufferedWriterMetrics("pulsar_txn_tc", writers, broker=broker),
            BufferedWriterMetrics("pulsar_txn_pending_ack_store", writers, broker=broker))
