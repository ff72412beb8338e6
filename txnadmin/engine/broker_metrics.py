"""What a broker's ``/metrics`` shows: the exposition (with the ``cluster`` label and Pulsar's buffered response)
and the gauges read from the components at scrape time. A one-broker engine exports the engine's own registry; each
broker of a cluster (engine/cluster/) its own, with the gauges of what it owns."""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..names import coordinator_assign_partition

Engine = Any  # the engine (engine.py, a floor up), read for its config, registry, coordinators and topics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# metricsBufferResponse: per registry (one per broker), the exposition of its current time slot
_BUFFERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def metrics_exposition(engine: Engine, registry: Optional[CollectorRegistry] = None) -> bytes:
    """A broker's ``/metrics``: ``registry`` (default: the engine's, a one-broker engine's) in the text format, every
    series labelled ``cluster`` first, as PrometheusMetricsGenerator writes it."""
    from prometheus_client import generate_latest

    source: CollectorRegistry = engine.registry if registry is None else registry
    cluster = engine.config.clusterName
    # Pulsar's buffered response: one exposition per managedLedgerStatsPeriodSeconds slot of the wall clock, so a
    # scrape may show the counters as they were when its slot's first scrape came.
    period_ms = max(1, engine.config.managedLedgerStatsPeriodSeconds) * 1000  # as Pulsar guards a hand-edited 0
    slot = int(time.time() * 1000) // period_ms if engine.config.metricsBufferResponse else None
    kept = _BUFFERED.get(source)
    if slot is not None and kept is not None and kept[0] == slot:
        return kept[1]

    class _WithCluster:
        def collect(self):
            for family in source.collect():
                family.samples = [s._replace(labels={"cluster": cluster, **s.labels}) for s in family.samples]
                yield family

    text = generate_latest(_WithCluster())
    if slot is not None:
        _BUFFERED[source] = (slot, text)
    return text


class ProcessCpu:
    """``process_cpu_seconds_total`` as a broker's JVM exports it (Prometheus' standard process exports, beside
    ``process_start_time_seconds``): it moves at every live scrape (rendering one costs CPU), so a reader can tell
    a live exposition from a frozen copy of one."""

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily("process_cpu_seconds", "Total user and system CPU time spent in seconds.",
                                  value=time.process_time())


class ScrapeTimeGauges:
    """What a broker computes at each exposition, read from the components: per coordinator the counters of
    TransactionAggregator (labelled ``coordinator_id``), per topic the transaction buffer's counts of
    TopicStats (``namespace``, ``topic``) and the sealed snapshot segments of TxnSnapshotSegmentStats.

    ``owns`` (a topic name, or a coordinator's assign partition → bool) keeps a broker of a cluster to what it owns."""

    def __init__(self, engine: Engine, owns: Optional[Callable[[str], bool]] = None):
        self.engine = engine
        self.owns = owns

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from .coordinator_metrics import COUNTER_NAMES, LATENCY_NAMES

        owns = self.owns or (lambda name: True)
        coordinators = [(i, tc) for i, tc in sorted(self.engine.coordinators.items())
                        if owns(coordinator_assign_partition(i))]
        active = GaugeMetricFamily("pulsar_txn_active_count", "-", labels=["coordinator_id"])
        counters = [(GaugeMetricFamily(name, "-", labels=["coordinator_id"]), attr) for name, attr in COUNTER_NAMES]
        latency = [GaugeMetricFamily(name, "-", labels=["coordinator_id"]) for name in LATENCY_NAMES]
        for tc_id, tc in coordinators:
            label = [str(tc_id)]
            active.add_metric(label, len(tc.txns))
            for family, attr in counters:
                family.add_metric(label, getattr(tc.counters, attr))
            for family, count in zip(latency, tc.counters.take_latency(), strict=True):
                family.add_metric(label, count)
        yield active
        yield from (family for family, _ in counters)
        yield from latency
        topics = [(name, t) for name, t in sorted(self.engine.topics.items()) if owns(name)]
        ongoing = GaugeMetricFamily("pulsar_txn_tb_active_total", "-", labels=["namespace", "topic"])
        aborted = GaugeMetricFamily("pulsar_txn_tb_aborted_total", "-", labels=["namespace", "topic"])
        committed = GaugeMetricFamily("pulsar_txn_tb_committed_total", "-", labels=["namespace", "topic"])
        segments = GaugeMetricFamily("pulsar_txn_tb_snapshot_index_total",
                                     "Number of snapshot segments maintained in the Pulsar transaction buffer.",
                                     labels=["namespace", "topic"])
        for name, topic in topics:
            labels = [_namespace_label(name), name]
            held = topic.buffer.processor.segment_count() if topic.buffer.processor.snapshot_type == "Segment" else 0
            open_now = len(topic.buffer.ongoing)
            # Unlike a broker, Ready topics with no transaction since they loaded are left out: at 10,000 topics
            # their zeros made every scrape (and each downgrade poll's two reads of /metrics) seconds slower.
            if not (open_now or topic.txn_committed or topic.txn_aborted or held or topic.buffer.state != "Ready"):
                continue
            ongoing.add_metric(labels, open_now)
            aborted.add_metric(labels, topic.txn_aborted)
            committed.add_metric(labels, topic.txn_committed)
            if topic.buffer.processor.snapshot_type == "Segment":
                segments.add_metric(labels, held)
        yield from (ongoing, aborted, committed, segments)


def _namespace_label(topic: str) -> str:
    from ..names import namespace_of

    try:
        return namespace_of(topic)
    except ValueError:
        return "unknown"
