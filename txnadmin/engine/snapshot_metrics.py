"""Transaction-buffer snapshot metrics with the names and labels of Pulsar's TxnSnapshotSegmentStats.

Pulsar's sources define the class (per topic: operations on segments and on indexes, the sealed segments held, the
size of each index entry written) and its tests, but the broker never creates one, so a broker exports none of
these; the engine exports them from its segmented processor. Op counters are labelled ``namespace``,
``topic_name``, ``op`` (add/del/read) and ``status`` (success/fail); the entry-size histogram ``namespace`` and
``topic``. The segment gauge (``pulsar_txn_tb_snapshot_index_total``, Pulsar's name for it) is collected from the
topics at scrape time by the engine.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

INDEX_BYTES_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
OPS = ("add", "del", "read")


class SnapshotMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        registry = registry if registry is not None else CollectorRegistry()
        labels = ["namespace", "topic_name", "op", "status"]
        self.segment_ops = Counter("pulsar_txn_tb_snapshot_segment_op",
                                   "Pulsar transaction buffer snapshot segment operation count.", labels,
                                   registry=registry)
        self.index_ops = Counter("pulsar_txn_tb_snapshot_index_op",
                                 "Pulsar transaction buffer snapshot index operation count.", labels,
                                 registry=registry)
        self.index_entry_bytes = Histogram(
            "pulsar_txn_tb_snapshot_index_entry_bytes",
            "Size of the snapshot index entry maintained in the Pulsar transaction buffer.", ["namespace", "topic"],
            buckets=INDEX_BYTES_BUCKETS, registry=registry)

    def segment(self, op: str, namespace: str, topic: str, ok: bool = True) -> None:
        self.segment_ops.labels(namespace, topic, op, "success" if ok else "fail").inc()

    def index(self, op: str, namespace: str, topic: str, ok: bool = True) -> None:
        self.index_ops.labels(namespace, topic, op, "success" if ok else "fail").inc()

    def index_entry(self, namespace: str, topic: str, size_bytes: int) -> None:
        self.index_entry_bytes.labels(namespace, topic).observe(size_bytes)
