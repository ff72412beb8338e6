"""The coordinator side's transaction-buffer client metrics, with Pulsar's names and labels
(TransactionBufferClientStatsImpl, topic-level metrics on).

Each end a coordinator sends to a topic (a marker) or to a subscription (a pending-ack end) is recorded under
that topic: ``pulsar_txn_tb_client_{commit,abort}_failed_total{namespace, topic}`` when it fails, else its latency
in nanoseconds into the summaries ``pulsar_txn_tb_client_{commit,abort}_latency{namespace, topic}`` (quantiles 0.5,
0.75, 0.95, 0.99, 0.999, 0.9999 and 1 over the latest observations). ``pulsar_txn_tb_client_pending_requests``
is the number of ends sent and not yet answered.
"""

from __future__ import annotations

import threading
from collections import deque

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.samples import Sample

from ..names import namespace_of

QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
WINDOW = 1024  # observations kept per topic for the quantiles


def _labels(topic: str) -> tuple[str, str]:
    try:
        return namespace_of(topic), topic
    except ValueError:
        return "unknown", "unknown"  # as Pulsar labels a topic name it cannot parse


class TransactionBufferClientMetrics:
    def __init__(self, registry: CollectorRegistry):
        labels = ["namespace", "topic"]
        self.commit_failed = Counter("pulsar_txn_tb_client_commit_failed", "-", labels, registry=registry)
        self.abort_failed = Counter("pulsar_txn_tb_client_abort_failed", "-", labels, registry=registry)
        self._lock = threading.Lock()
        self._pending = 0
        # (commit?, namespace, topic) → [count, sum of nanoseconds, recent observations]
        self._latency: dict[tuple[bool, str, str], list] = {}
        registry.register(self)

    def sent(self) -> None:
        with self._lock:
            self._pending += 1

    def unwatched(self) -> None:
        """A request sent whose answer nobody waits for any more: no longer pending, its outcome unknown."""
        with self._lock:
            self._pending -= 1

    def answered(self, topic: str, commit: bool, ok: bool, nanos: int) -> None:
        labels = _labels(topic)
        with self._lock:
            self._pending -= 1
            if ok:
                slot = self._latency.setdefault((commit, *labels), [0, 0.0, deque(maxlen=WINDOW)])
                slot[0] += 1
                slot[1] += nanos
                slot[2].append(nanos)
        if not ok:
            (self.commit_failed if commit else self.abort_failed).labels(*labels).inc()

    def collect(self):
        with self._lock:
            pending = self._pending
            items = [(k, v[0], v[1], sorted(v[2])) for k, v in self._latency.items()]
        yield GaugeMetricFamily("pulsar_txn_tb_client_pending_requests", "-", value=pending)
        for commit in (True, False):
            name = f"pulsar_txn_tb_client_{'commit' if commit else 'abort'}_latency"
            family = SummaryMetricFamily(name, "-", labels=["namespace", "topic"])
            for (kind, namespace, topic), count, total, recent in items:
                if kind != commit:
                    continue
                family.add_metric([namespace, topic], count, total)
                for q in QUANTILES:
                    value = recent[min(len(recent) - 1, int(q * len(recent)))] if recent else float("nan")
                    family.samples.append(Sample(name, {"namespace": namespace, "topic": topic, "quantile": str(q)},
                                                 float(value)))
            yield family

    def describe(self):
        return [GaugeMetricFamily("pulsar_txn_tb_client_pending_requests", "-"),
                SummaryMetricFamily("pulsar_txn_tb_client_commit_latency", "-", labels=["namespace", "topic"]),
                SummaryMetricFamily("pulsar_txn_tb_client_abort_latency", "-", labels=["namespace", "topic"])]
