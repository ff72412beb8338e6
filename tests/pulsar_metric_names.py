"""The checked list of Pulsar's own transaction metric names: what a broker exports, with its labels and the file of
apache/pulsar that defines it. The engine must export each one with exactly these labels (plus ``cluster``, which a
broker adds to every series), and an alert rule or dashboard panel may use a ``pulsar_`` name only if it is here.

``name`` is the family as a query names it: a counter's ``…_total``, a gauge, or the base name of a histogram
(``_bucket``/``_sum``/``_count``) or summary (quantiles, ``_sum``/``_count``).
"""

from __future__ import annotations

from dataclasses import dataclass

_STATS = "pulsar-broker/src/main/java/org/apache/pulsar/broker/stats/prometheus/"
TRANSACTION_AGGREGATOR = _STATS + "TransactionAggregator.java"  # names as renamed to *_total in 2.11 (PR #16581)
TOPIC_STATS = _STATS + "TopicStats.java"
TB_CLIENT_STATS = ("pulsar-broker/src/main/java/org/apache/pulsar/broker/transaction/buffer/impl/"
                   "TransactionBufferClientStatsImpl.java")
PENDING_ACK_STATS = ("pulsar-broker/src/main/java/org/apache/pulsar/broker/transaction/pendingack/impl/"
                     "PendingAckHandleStatsImpl.java")
BUFFERED_WRITER_STATS = ("pulsar-transaction/coordinator/src/main/java/org/apache/pulsar/transaction/coordinator/impl/"
                         "TxnLogBufferedWriterMetricsStats.java")
SNAPSHOT_SEGMENT_STATS = ("pulsar-broker/src/main/java/org/apache/pulsar/broker/transaction/buffer/stats/"
                          "TxnSnapshotSegmentStats.java")


@dataclass(frozen=True)
class PulsarMetric:
    name: str
    kind: str  # gauge | counter | histogram | summary
    labels: frozenset[str]
    source: str

    def sample_names(self) -> set[str]:
        """The sample names a scrape shows for this family."""
        if self.kind == "histogram":
            return {self.name + "_bucket", self.name + "_sum", self.name + "_count"}
        if self.kind == "summary":
            return {self.name, self.name + "_sum", self.name + "_count"}
        return {self.name}


def _m(name: str, kind: str, labels: tuple[str, ...], source: str) -> PulsarMetric:
    return PulsarMetric(name, kind, frozenset(labels), source)


_COORDINATOR = ("coordinator_id",)
_LATENCY_BOUNDS = ("10", "20", "50", "100", "500", "1000", "5000", "15000", "30000", "60000", "300000", "1500000",
                   "3000000", "overflow")
_TOPIC = ("namespace", "topic")

PULSAR_METRICS: tuple[PulsarMetric, ...] = (
    # the transaction coordinator (TransactionMetadataStoreStats, written per coordinator by TransactionAggregator)
    _m("pulsar_txn_active_count", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    _m("pulsar_txn_created_total", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    _m("pulsar_txn_committed_total", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    _m("pulsar_txn_aborted_total", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    _m("pulsar_txn_timeout_total", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    _m("pulsar_txn_append_log_total", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR),
    *(_m(f"pulsar_txn_execution_latency_le_{b}", "gauge", _COORDINATOR, TRANSACTION_AGGREGATOR)
      for b in _LATENCY_BOUNDS),
    # the transaction buffer per topic (topic-level metrics on, Pulsar's default)
    _m("pulsar_txn_tb_active_total", "gauge", _TOPIC, TOPIC_STATS),
    _m("pulsar_txn_tb_aborted_total", "gauge", _TOPIC, TOPIC_STATS),
    _m("pulsar_txn_tb_committed_total", "gauge", _TOPIC, TOPIC_STATS),
    # the coordinator's requests to transaction buffers and pending-ack stores
    _m("pulsar_txn_tb_client_commit_failed_total", "counter", _TOPIC, TB_CLIENT_STATS),
    _m("pulsar_txn_tb_client_abort_failed_total", "counter", _TOPIC, TB_CLIENT_STATS),
    _m("pulsar_txn_tb_client_commit_latency", "summary", _TOPIC, TB_CLIENT_STATS),
    _m("pulsar_txn_tb_client_abort_latency", "summary", _TOPIC, TB_CLIENT_STATS),
    _m("pulsar_txn_tb_client_pending_requests", "gauge", (), TB_CLIENT_STATS),
    # pending-ack handles per subscription
    _m("pulsar_txn_tp_committed_count_total", "counter", ("namespace", "topic", "subscription", "status"),
       PENDING_ACK_STATS),
    _m("pulsar_txn_tp_aborted_count_total", "counter", ("namespace", "topic", "subscription", "status"),
       PENDING_ACK_STATS),
    _m("pulsar_txn_tp_commit_latency", "summary", ("namespace", "topic", "subscription"), PENDING_ACK_STATS),
    # the two batched log writers (PIP-160), one per component and broker
    *(m for prefix in ("pulsar_txn_tc", "pulsar_txn_pending_ack_store") for m in (
        _m(f"{prefix}_bufferedwriter_batch_records", "histogram", ("broker",), BUFFERED_WRITER_STATS),
        _m(f"{prefix}_bufferedwriter_batch_size_bytes", "histogram", ("broker",), BUFFERED_WRITER_STATS),
        _m(f"{prefix}_bufferedwriter_batch_oldest_record_delay_seconds", "histogram", ("broker",),
           BUFFERED_WRITER_STATS),
        *(_m(f"{prefix}_bufferedwriter_flush_trigger_{t}_total", "counter", ("broker",), BUFFERED_WRITER_STATS)
          for t in ("max_records", "max_size", "max_delay", "large_data")),
    )),
    # transaction-buffer snapshot segments (PIP-196; defined in Pulsar's sources, exported by the engine)
    _m("pulsar_txn_tb_snapshot_segment_op_total", "counter", ("namespace", "topic_name", "op", "status"),
       SNAPSHOT_SEGMENT_STATS),
    _m("pulsar_txn_tb_snapshot_index_op_total", "counter", ("namespace", "topic_name", "op", "status"),
       SNAPSHOT_SEGMENT_STATS),
    _m("pulsar_txn_tb_snapshot_index_total", "gauge", _TOPIC, SNAPSHOT_SEGMENT_STATS),
    _m("pulsar_txn_tb_snapshot_index_entry_bytes", "histogram", _TOPIC, SNAPSHOT_SEGMENT_STATS),
)

BY_NAME = {m.name: m for m in PULSAR_METRICS}


def family_of(sample_name: str) -> PulsarMetric | None:
    """The listed family a sample or series name belongs to (``x_bucket`` → ``x``), None when it is not listed."""
    for m in PULSAR_METRICS:
        if sample_name in m.sample_names():
            return m
    return None


# What `txnadmin exporter` exports (its own names, issue #28), with their labels: rules and panels may use these too.
TXNADMIN_EXPORTER_METRICS: dict[str, frozenset[str]] = {
    "txnadmin_transactions_open": frozenset({"coordinator", "state"}),
    "txnadmin_oldest_open_transaction_age_seconds": frozenset({"coordinator"}),
    "txnadmin_transactions_past_timeout": frozenset({"coordinator"}),
    "txnadmin_transactions_hanging": frozenset({"coordinator"}),
    "txnadmin_transactions_stuck_ending": frozenset({"coordinator", "state"}),
    "txnadmin_transaction_buffers_recovering": frozenset(),
    "txnadmin_transaction_buffer_recovery_age_seconds": frozenset({"topic"}),
    "txnadmin_max_read_position_held_seconds": frozenset({"topic"}),
    "txnadmin_downgrade_checklist_loaded": frozenset(),
    "txnadmin_downgrade_logs": frozenset({"status"}),
    "txnadmin_downgrade_waiting_logs": frozenset({"reason"}),
    "txnadmin_batching_enabled": frozenset({"broker", "flag"}),
    "txnadmin_doctor_findings": frozenset({"check", "severity"}),
    "txnadmin_poll_age_seconds": frozenset(),
    "txnadmin_poll_duration_seconds": frozenset(),
    "txnadmin_poll_errors_total": frozenset(),
    "txnadmin_last_poll_success_timestamp_seconds": frozenset(),
}


def metric_names_in(expr: str) -> set[str]:
    """The pulsar_/txnadmin_ names a PromQL expression reads: plain selectors, and every listed name a
    ``__name__=~"…"`` matcher selects (a matcher that selects no listed name is returned as itself, to fail)."""
    import re

    names = set(re.findall(r"(?<![\w\"])((?:pulsar|txnadmin)_[a-zA-Z0-9_]+)", expr))
    known = [n for m in PULSAR_METRICS for n in m.sample_names()] + list(TXNADMIN_EXPORTER_METRICS)
    for pattern in re.findall(r'__name__\s*=~\s*"([^"]+)"', expr):
        selected = {n for n in known if re.fullmatch(pattern, n)}
        names |= selected or {f"__name__=~{pattern}"}
    return names
