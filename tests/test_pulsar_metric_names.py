"""The engine's /metrics against the checked list of Pulsar's names (tests/pulsar_metric_names.py): every listed
family is exported with exactly its labels, nothing unlisted carries a ``pulsar_txn`` name, and the coordinator and
transaction-buffer numbers count what the workload did, as Pulsar's stores count it."""

from __future__ import annotations

import pytest

from engine_helpers import Clock, open_engine
from pulsar_metric_names import BY_NAME, PULSAR_METRICS, family_of
from txnadmin.engine.broker_metrics import metrics_exposition
from txnadmin.engine.topic import TransactionBufferNotReady

TOPIC = "persistent://public/default/orders"
STALLED = "persistent://public/default/stalled"
QUIET = "persistent://public/default/quiet"
# small enough that the aborts below seal a snapshot segment (Pulsar's capacity formula: 3 bytes per id)
SEGMENT_SIZE = 8 + len(TOPIC) + 3 * 2
SETTINGS = {"transactionLogBatchedWriteEnabled": "true", "transactionPendingAckBatchedWriteEnabled": "true",
            "transactionBufferSegmentedSnapshotEnabled": "true",
            "transactionBufferSnapshotSegmentSize": str(SEGMENT_SIZE), "clusterName": "east"}


def _scrape(engine) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    text = metrics_exposition(engine).decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _value(samples, name, **labels) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def _workload(engine, clock: Clock, stall: bool = True) -> dict:
    """Two commits and three aborts that each produce and ack, then one transaction left to time out."""
    engine.subscribe(QUIET, "sub")
    engine.publish(QUIET, b"no transaction here")
    engine.subscribe(TOPIC, "sub")
    positions = [engine.publish(TOPIC, bytes([i])) for i in range(5)]
    engine.receive(TOPIC, "sub", 5)
    for pos, commit in zip(positions, (True, False, True, False, False), strict=True):
        txn = engine.begin(60_000)
        engine.produce(txn, TOPIC, b"x")
        engine.ack(txn, TOPIC, "sub", [pos])
        clock.advance(30)  # open 30 ms: the 50 ms latency bucket
        engine.end_transaction(txn, commit)
    late = engine.begin(1_000)
    clock.advance(2_000)
    assert engine.abort_timed_out() == [late]
    # a commit refused by a buffer that never finishes recovering (apache/pulsar#17040): a failed client request
    if not stall:
        return {"tc": str(late[0])}
    held, dropped = engine.begin(60_000), engine.begin(60_000)
    engine.produce(held, STALLED, b"y")
    engine.produce(dropped, STALLED, b"z")
    engine.stall_topic_recovery(STALLED)
    for txn, commit in ((held, True), (dropped, False)):
        with pytest.raises(TransactionBufferNotReady):
            engine.end_transaction(txn, commit)
    return {"tc": str(late[0])}


def test_every_listed_name_is_exported_with_its_labels_and_nothing_unlisted(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock, transactionCoordinatorCount=1, **SETTINGS) as engine:
        _workload(engine, clock)
        samples = _scrape(engine)
    seen: dict[str, set[frozenset]] = {}
    for s in samples:
        assert s.labels.get("cluster") == "east", s
        if not s.name.startswith("pulsar_txn"):
            continue
        if s.name.endswith("_created"):  # prometheus-client's creation time of a counter, as Java's simpleclient has
            continue
        family = family_of(s.name)
        assert family is not None, f"{s.name} is exported but not on Pulsar's list"
        labels = set(s.labels) - {"cluster", "le", "quantile"}
        assert labels == set(family.labels), (s.name, labels, family)
        seen.setdefault(family.name, set()).add(frozenset(s.labels))
    missing = [m.name for m in PULSAR_METRICS if m.name not in seen]
    assert not missing, f"listed but not exported: {missing}"
    stalled = {"namespace": "public/default", "topic": STALLED}
    assert _value(samples, "pulsar_txn_tb_client_commit_failed_total", **stalled) == 1
    assert _value(samples, "pulsar_txn_tb_client_abort_failed_total", **stalled) == 1
    assert _value(samples, "pulsar_txn_active_count", coordinator_id="0") == 2  # held COMMITTING and ABORTING
    # reloaded with nothing replayed, but recovering: kept, so a dashboard's topic list shows it
    assert _value(samples, "pulsar_txn_tb_active_total", **stalled) == 0


def test_coordinator_and_buffer_counters_count_what_happened(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock, transactionCoordinatorCount=1, **SETTINGS) as engine:
        tc = _workload(engine, clock, stall=False)["tc"]
        first = _scrape(engine)
        second = _scrape(engine)
        engine.reload_coordinator(int(tc))
        reloaded = _scrape(engine)
    assert _value(first, "pulsar_txn_created_total", coordinator_id=tc) == 6
    assert _value(first, "pulsar_txn_committed_total", coordinator_id=tc) == 2
    assert _value(first, "pulsar_txn_aborted_total", coordinator_id=tc) == 4  # three aborts and the timed-out one
    assert _value(first, "pulsar_txn_timeout_total", coordinator_id=tc) == 1
    assert _value(first, "pulsar_txn_active_count", coordinator_id=tc) == 0
    # NEW + ADD_PARTITION + ADD_SUBSCRIPTION + two UPDATEs for five; NEW + two UPDATEs for the timed-out one;
    assert _value(first, "pulsar_txn_append_log_total", coordinator_id=tc) == 5 * 5 + 3
    assert _value(first, "pulsar_txn_execution_latency_le_50", coordinator_id=tc) == 5
    assert _value(first, "pulsar_txn_execution_latency_le_5000", coordinator_id=tc) == 1
    # StatsBuckets: each exposition shows the ends since the one before
    assert sum(s.value for s in second if s.name.startswith("pulsar_txn_execution_latency_le_")) == 0
    assert _value(second, "pulsar_txn_created_total", coordinator_id=tc) == 6
    # a coordinator loaded again starts counting again, as a broker's new store does
    assert _value(reloaded, "pulsar_txn_created_total", coordinator_id=tc) == 0
    topic = {"namespace": "public/default", "topic": TOPIC}
    assert _value(first, "pulsar_txn_tb_committed_total", **topic) == 2
    assert _value(first, "pulsar_txn_tb_aborted_total", **topic) == 3  # the timed-out one produced nothing
    assert _value(first, "pulsar_txn_tb_active_total", **topic) == 0
    # each commit sent a marker and a subscription end: two requests on the topic per transaction
    assert _value(first, "pulsar_txn_tb_client_commit_latency_count", **topic) == 4
    assert _value(first, "pulsar_txn_tb_client_abort_latency_count", **topic) == 6
    assert _value(first, "pulsar_txn_tb_client_pending_requests") == 0
    assert _value(first, "pulsar_txn_tb_snapshot_index_total", **topic) >= 1
    # a topic with no transaction since it loaded is left out (at 10,000 topics its zeros cost seconds a scrape)
    assert not [s for s in first if s.labels.get("topic") == QUIET]


def test_a_quiet_topic_appears_with_its_first_transaction(tmp_path):
    with open_engine(tmp_path, Clock(), transactionCoordinatorCount=1) as engine:
        engine.subscribe(QUIET, "sub")
        engine.publish(QUIET, b"plain")
        assert not [s for s in _scrape(engine) if s.labels.get("topic") == QUIET]
        txn = engine.begin(60_000)
        engine.produce(txn, QUIET, b"x")
        assert _value(_scrape(engine), "pulsar_txn_tb_active_total", namespace="public/default", topic=QUIET) == 1
        engine.end_transaction(txn, True)
        after = _scrape(engine)
    assert _value(after, "pulsar_txn_tb_active_total", namespace="public/default", topic=QUIET) == 0
    assert _value(after, "pulsar_txn_tb_committed_total", namespace="public/default", topic=QUIET) == 1


def test_the_list_names_real_sources_and_sane_kinds():
    for m in PULSAR_METRICS:
        assert m.source.endswith(".java") and m.source.startswith(("pulsar-broker/", "pulsar-transaction/")), m
        assert m.kind in ("gauge", "counter", "histogram", "summary"), m
        assert m.kind != "counter" or m.name.endswith("_total"), m
    assert len(BY_NAME) == len(PULSAR_METRICS)
