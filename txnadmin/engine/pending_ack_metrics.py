"""Pending-ack handle metrics with Pulsar's names and labels (PendingAckHandleStatsImpl, topic-level on).

``pulsar_txn_tp_committed_count`` / ``pulsar_txn_tp_aborted_count`` count transaction ends per
(namespace, topic, subscription, status=succeed|failed); ``pulsar_txn_tp_commit_latency`` is a summary of
successful commit latencies in microseconds with quantiles 0.5, 0.9, 0.99 and 0.999. prometheus-client's Summary
has no quantiles, so this one keeps the latest observations per subscription and computes them at scrape time
(Pulsar's client library uses a sliding window too).
"""

from __future__ import annotations

import threading
from collections import deque

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import SummaryMetricFamily
from prometheus_client.samples import Sample

from ..names import namespace_of

QUANTILES = (0.5, 0.9, 0.99, 0.999)
WINDOW = 1024  # observations kept per subscription for the quantiles


def _namespace(topic: str) -> str:
    try:
        return namespace_of(topic)
    except ValueError:
        return "unknown"


class PendingAckMetrics:
    def __init__(self, registry: CollectorRegistry):
        labels = ["namespace", "topic", "subscription", "status"]
        self.committed = Counter("pulsar_txn_tp_committed_count", "-", labels, registry=registry)
        self.aborted = Counter("pulsar_txn_tp_aborted_count", "-", labels, registry=registry)
        self._lock = threading.Lock()
        self._latency: dict[tuple[str, str, str], list] = {}  # labels → [count, sum, recent observations]
        registry.register(self)

    def record_end(self, topic: str, subscription: str, commit: bool, success: bool, nanos: int) -> None:
        namespace = _namespace(topic)
        status = "succeed" if success else "failed"
        (self.committed if commit else self.aborted).labels(namespace, topic, subscription, status).inc()
        if commit and success:
            micros = nanos // 1000
            with self._lock:
                slot = self._latency.setdefault((namespace, topic, subscription), [0, 0.0, deque(maxlen=WINDOW)])
                slot[0] += 1
                slot[1] += micros
                slot[2].append(micros)

    def collect(self):
        family = SummaryMetricFamily("pulsar_txn_tp_commit_latency", "-",
                                     labels=["namespace", "topic", "subscription"])
        with self._lock:
            items = [(k, v[0], v[1], sorted(v[2])) for k, v in self._latency.items()]
        for labels, count, total, recent in items:
            family.add_metric(list(labels), count, total)
            for q in QUANTILES:
                value = recent[min(len(recent) - 1, int(q * len(recent)))] if recent else float("nan")
                family.samples.append(Sample(
                    "pulsar_txn_tp_commit_latency",
                    {"namespace": labels[0], "topic": labels[1], "subscription": labels[2], "quantile": str(q)},
                    float(value)))
        yield family

    def describe(self):
        return [SummaryMetricFamily("pulsar_txn_tp_commit_latency", "-", labels=["namespace", "topic", "subscription"])]
