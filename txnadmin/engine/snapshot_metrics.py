"""The transaction-buffer snapshot metrics PIP-196 proposed (Pulsar never exported them).

Names as in the proposal's table, with the ``op``/``status`` labels of Pulsar's unused
``TxnSnapshotSegmentStats``: operations on segments and on indexes, and the size of each index
entry written. The segment-count gauge is collected from the topics at scrape time by the engine.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

INDEX_BYTES_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
OPS = ("add", "del", "read")


class SnapshotMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        registry = registry if registry is not None else CollectorRegistry()
        self.segment_ops = Counter("pulsar_txn_tb_snapshot_segment_op",
                                   "Transaction-buffer snapshot segment operations", ["op", "status"],
                                   registry=registry)
        self.index_ops = Counter("pulsar_txn_tb_snapshot_index_op",
                                 "Transaction-buffer snapshot index operations", ["op", "status"], registry=registry)
        self.index_entry_bytes = Histogram("pulsar_txn_tb_snapshot_index_entry_bytes",
                                           "Size of each transaction-buffer snapshot index entry written",
                                           buckets=INDEX_BYTES_BUCKETS, registry=registry)

    def segment(self, op: str, ok: bool = True) -> None:
        self.segment_ops.labels(op, "success" if ok else "fail").inc()

    def index(self, op: str, ok: bool = True) -> None:
        self.index_ops.labels(op, "success" if ok else "fail").inc()
