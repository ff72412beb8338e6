"""Transaction-buffer snapshots: single and segmented (PIP-196) processors, on-demand segments, shared reader."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine_helpers import Clock, open_engine
from txnadmin.engine import stats
from txnadmin.engine.managed_ledger import ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerStorage
from txnadmin.engine.segmented_snapshot_processor import SegmentedSnapshotProcessor
from txnadmin.engine.tb_snapshot import SnapshotService, segment_capacity, segment_key
from txnadmin.names import INDEXES_TOPIC, SNAPSHOT_TOPIC

TOPIC = "persistent://public/default/payments"
CAPACITY = 4
# transactionBufferSnapshotSegmentSize giving CAPACITY ids per segment for TOPIC (Pulsar's formula inverted)
SEGMENT_SIZE = 8 + len(TOPIC) + 3 * CAPACITY

MODES = {
    "single": {},
    "segmented": {"transactionBufferSegmentedSnapshotEnabled": "true",
                  "transactionBufferSnapshotSegmentSize": str(SEGMENT_SIZE)},
    "segmented-eager": {"transactionBufferSegmentedSnapshotEnabled": "true",
                        "transactionBufferSnapshotSegmentSize": str(SEGMENT_SIZE),
                        "engineTransactionBufferSegmentsOnDemand": "false"},
}


def engine_for(path: Path, mode: str, clock=None, **extra):
    settings = dict(MODES[mode], managedLedgerMaxEntriesPerLedger="1000")
    settings.update(extra)
    return open_engine(path, clock or Clock(), **settings)


def run_txns(engine, outcomes: str, topic: str = TOPIC) -> dict[str, list]:
    """One transaction per letter: c = commit, a = abort, o = left open. Returns txn ids by outcome."""
    out = {"c": [], "a": [], "o": []}
    for i, kind in enumerate(outcomes):
        txn = engine.begin()
        engine.produce(txn, topic, f"{kind}{i}".encode())
        if kind == "c":
            engine.commit(txn)
        elif kind == "a":
            engine.abort(txn)
        out[kind].append(txn)
    return out


def payloads(engine, sub="s", topic=TOPIC):
    engine.topic(topic).redeliver(sub)
    return [m.payload.decode() for m in engine.receive(topic, sub, 1000)]


def latest(engine, local, topic=TOPIC):
    return engine.snapshots.peek("public/default", local, topic)


def test_capacity_follows_pulsars_formula():
    assert segment_capacity(262144, "persistent://public/default/" + "x" * 12) == 87365
    assert segment_capacity(SEGMENT_SIZE, TOPIC) == CAPACITY
    assert segment_capacity(10, TOPIC) == 1  # never zero


@pytest.mark.parametrize("mode", list(MODES))
def test_read_committed_filtering(tmp_path, mode):
    engine = engine_for(tmp_path, mode)
    engine.subscribe(TOPIC, "s")
    engine.publish(TOPIC, b"plain0")
    txns = run_txns(engine, "caacaoa")
    engine.publish(TOPIC, b"plain1")
    # the open transaction (o5) holds back everything after it: the max read position stops before it
    assert payloads(engine) == ["plain0", "c0", "c3"]
    engine.commit(txns["o"][0])
    assert payloads(engine) == ["plain0", "c0", "c3", "o5", "plain1"]
    for txn in txns["a"]:
        assert stats.transaction_in_buffer_stats(engine, txn, TOPIC) == {"aborted": True}
    assert stats.transaction_in_buffer_stats(engine, txns["c"][0], TOPIC) == {"aborted": False}
    tb = stats.transaction_buffer_stats(engine, TOPIC, segment_stats=True)
    assert tb["totalAbortedTransactions"] == 4
    assert tb["snapshotType"] == ("Single" if mode == "single" else "Segment")
    engine.close()
    # the same after recovery
    engine = engine_for(tmp_path, mode)
    assert payloads(engine) == ["plain0", "c0", "c3", "o5", "plain1"]
    assert stats.transaction_buffer_stats(engine, TOPIC)["totalAbortedTransactions"] == 4
    engine.close()


def test_segment_sealing_and_index_update(tmp_path):
    engine = engine_for(tmp_path, "segmented", transactionBufferSnapshotMaxTransactionCount="1000")
    txns = run_txns(engine, "a" * 9 + "c")
    tb = stats.transaction_buffer_stats(engine, TOPIC, segment_stats=True)
    seg = tb["segmentsStats"]
    assert seg["segmentsSize"] == 2 and seg["currentSegmentCapacity"] == CAPACITY
    assert seg["unsealedAbortTxnIDSize"] == 1 and tb["totalAbortedTransactions"] == 9
    last_of_first = txns["a"][CAPACITY - 1]
    assert seg["segmentStats"][0]["lastTxnID"] == f"({last_of_first[0]},{last_of_first[1]})"
    # each sealed segment is one keyed entry; the index lists both and carries the unsealed tail
    segments = engine.snapshots.segments("public/default")
    assert sorted(segments.keys()) == [segment_key(0, TOPIC), segment_key(1, TOPIC)]
    key, value = segments.read(Position.parse(str(_index_positions(engine)[0])))
    assert key == segment_key(0, TOPIC)
    assert [tuple(a) for a in value["aborts"]] == [tuple(t) for t in txns["a"][:CAPACITY]]
    index = latest(engine, INDEXES_TOPIC)
    assert [i["sequenceID"] for i in index["indexList"]] == [0, 1]
    assert index["snapshot"]["aborts"] == []  # written when segment 1 sealed; the 9th abort came later
    # a snapshot (here: the timer path) rewrites only the index, with the current max read position
    open_txn = engine.begin()
    engine.produce(open_txn, TOPIC, b"pending")
    engine.topic(TOPIC).buffer.take_snapshot()
    index = latest(engine, INDEXES_TOPIC)
    mrp = engine.topic(TOPIC).buffer.max_read_position()
    assert [tuple(a[:2]) for a in index["snapshot"]["aborts"]] == [tuple(txns["a"][8])]
    assert (index["snapshot"]["maxReadPositionLedgerId"], index["snapshot"]["maxReadPositionEntryId"]) == (
        mrp.ledger_id, mrp.entry_id)
    assert sorted(segments.keys()) == [segment_key(0, TOPIC), segment_key(1, TOPIC)]  # no new segment
    engine.close()


def _index_positions(engine):
    return [Position(i["segmentLedgerID"], i["segmentEntryID"]) for i in latest(engine, INDEXES_TOPIC)["indexList"]]


def test_snapshot_after_max_transaction_count_and_timer(tmp_path):
    clock = Clock()
    engine = engine_for(tmp_path, "single", clock, transactionBufferSnapshotMaxTransactionCount="3",
                        transactionBufferSnapshotMinTimeInMillis="5000")
    run_txns(engine, "ac")
    assert latest(engine, SNAPSHOT_TOPIC) is None  # 2 markers < 3
    run_txns(engine, "a")
    snap = latest(engine, SNAPSHOT_TOPIC)
    assert len(snap["aborts"]) == 2 and snap["topicName"] == TOPIC
    run_txns(engine, "a")
    assert engine.snapshot_transaction_buffers() == 0  # changes pending, but too soon
    clock.advance(5000)
    assert engine.snapshot_transaction_buffers() == 1
    assert len(latest(engine, SNAPSHOT_TOPIC)["aborts"]) == 3
    assert engine.snapshot_transaction_buffers() == 0  # nothing changed since
    engine.close()


@pytest.mark.parametrize("mode", ["single", "segmented"])
def test_aborts_and_segments_go_when_the_marker_ledger_is_trimmed(tmp_path, mode):
    engine = engine_for(tmp_path, mode, managedLedgerMaxEntriesPerLedger="4")
    engine.subscribe(TOPIC, "s")
    run_txns(engine, "a" * 10)
    if mode == "segmented":
        first_segment = _index_positions(engine)[0]
    assert payloads(engine) == []  # reading acknowledges aborted messages and markers for the reader
    before = stats.transaction_buffer_stats(engine, TOPIC, segment_stats=True)
    assert before["totalAbortedTransactions"] == 10
    engine.sweep_ledgers()
    first_live = engine.topic(TOPIC).ledger.ledgers()[0].ledger_id
    assert first_live > 0  # the topic did trim
    after = stats.transaction_buffer_stats(engine, TOPIC, segment_stats=True)
    processor = engine.topic(TOPIC).buffer.processor
    if mode == "single":
        # exactly the aborts whose marker sits in a trimmed ledger are gone
        assert after["totalAbortedTransactions"] == len(processor.aborts) < 10
        assert all(marker.ledger_id >= first_live for marker in processor.aborts.values())
    else:
        assert after["segmentsStats"]["segmentsSize"] < before["segmentsStats"]["segmentsSize"]
        for entry in after["segmentsStats"]["segmentStats"]:
            assert Position.parse(entry["persistentPosition"]).ledger_id >= first_live
        segments = engine.snapshots.segments("public/default")
        live_keys = {segment_key(i["sequenceID"], TOPIC) for i in latest(engine, INDEXES_TOPIC)["indexList"]}
        assert set(segments.keys()) == live_keys  # trimmed segments were tombstoned
        assert segment_key(0, TOPIC) not in live_keys
        assert segments.cursor.is_deleted(first_segment)  # and their entries are dead on the log's cursor
    engine.close()
    engine = engine_for(tmp_path, mode, managedLedgerMaxEntriesPerLedger="4")
    assert stats.transaction_buffer_stats(engine, TOPIC)["totalAbortedTransactions"] == after["totalAbortedTransactions"]
    engine.close()


def test_dead_segment_ledgers_are_trimmed_from_the_segments_log(tmp_path):
    engine = engine_for(tmp_path, "segmented", managedLedgerMaxEntriesPerLedger="2")
    engine.subscribe(TOPIC, "s")
    run_txns(engine, "a" * 8)
    first_segment = _index_positions(engine)[0]
    for _ in range(4):
        run_txns(engine, "a" * 8)
        payloads(engine)
        engine.sweep_ledgers()
    segments = engine.snapshots.segments("public/default")
    live = {segment_key(i["sequenceID"], TOPIC) for i in latest(engine, INDEXES_TOPIC)["indexList"]}
    assert set(segments.keys()) == live
    # the segments log rolled over and trimmed the ledger that held the first, long-dead segment
    assert first_segment.ledger_id not in {info.ledger_id for info in segments.ledger.ledgers()}
    with pytest.raises(KeyError):
        segments.read(first_segment)
    engine.close()


@pytest.mark.parametrize("on_demand", [True, False])
def test_recovery_loads_segments_on_demand_with_a_bounded_cache(tmp_path, on_demand):
    mode = "segmented" if on_demand else "segmented-eager"
    engine = engine_for(tmp_path, mode, engineTransactionBufferSegmentCacheSize="2")
    engine.subscribe(TOPIC, "s")
    txns = run_txns(engine, ("ac" * 20) + "c")
    engine.close()
    engine = engine_for(tmp_path, mode, engineTransactionBufferSegmentCacheSize="2")
    processor = engine.topic(TOPIC).buffer.processor
    assert isinstance(processor, SegmentedSnapshotProcessor)
    assert len(processor.indexes) == 5
    if on_demand:
        assert processor.segments_loaded == 0 and not processor.sealed
    else:
        assert processor.segments_loaded == 5 and len(processor.sealed) == 20
    assert payloads(engine) == [f"c{i}" for i in range(1, 41, 2)] + ["c40"]
    for txn in txns["a"]:
        assert processor.is_aborted(txn)
    for txn in txns["c"]:
        assert not processor.is_aborted(txn)
    if on_demand:
        assert len(processor._cache) <= 2
    engine.close()


@pytest.fixture
def factory(tmp_path):
    """Managed ledgers on fresh engine storage, for tests that drive the snapshot service directly."""
    storage = LedgerStorage.open(tmp_path)
    yield ManagedLedgerFactory(storage)
    storage.close()


def test_on_demand_abort_check_is_exact(factory):
    """Random aborts from several coordinators, checked at random message positions against the truth."""
    rng = random.Random(7)
    service = SnapshotService(factory, lambda: None)
    processor = SegmentedSnapshotProcessor(TOPIC, service, lambda: 0, capacity=5, on_demand=True, cache_segments=1)
    truth: dict[tuple[int, int], tuple[Position, Position]] = {}  # txn → (first message, abort marker)
    entry = 0
    open_txns: dict[tuple[int, int], Position] = {}
    seqs = {0: 0, 1: 0, 2: 0}
    for _ in range(400):
        if open_txns and rng.random() < 0.5:
            txn = rng.choice(sorted(open_txns))
            first = open_txns.pop(txn)
            entry += 1
            marker = Position(3, entry)
            if rng.random() < 0.6:
                processor.put_aborted(txn, marker, lambda: Position(0, 0))
                truth[txn] = (first, marker)
        else:
            tc = rng.randrange(3)
            txn = (tc, seqs[tc])
            seqs[tc] += 1
            entry += 1
            open_txns[txn] = Position(3, entry)
    assert len(processor.indexes) > 5
    everyone = [(tc, s) for tc in seqs for s in range(seqs[tc])]
    for txn in everyone:
        if txn in truth:
            first, marker = truth[txn]
            at = Position(3, rng.randrange(first.entry_id, marker.entry_id))
            assert processor.is_aborted(txn, at), txn
            assert processor.is_aborted(txn), txn
        else:
            assert not processor.is_aborted(txn, Position(3, rng.randrange(entry + 1))), txn
            assert not processor.is_aborted(txn), txn
    service.close()


@pytest.mark.parametrize("on_demand", [True, False])
def test_aborts_arriving_out_of_marker_order_are_all_kept(factory, on_demand):
    """Concurrent aborts finish in any order, so markers reach the processor out of log order: none may be lost
    (an older marker used to be taken for a replay and dropped, showing the aborted messages to readers)."""
    rng = random.Random(11)
    service = SnapshotService(factory, lambda: None)
    processor = SegmentedSnapshotProcessor(TOPIC, service, lambda: 0, capacity=5, on_demand=on_demand,
                                           cache_segments=1)
    # transaction i: its message at entry 2i, its abort marker at 2i + 1 (within a window of 6, any order)
    txns = [(i % 3, i) for i in range(60)]
    arrival = []
    for start in range(0, len(txns), 6):
        window = txns[start:start + 6]
        rng.shuffle(window)
        arrival += window
    for txn in arrival:
        processor.put_aborted(txn, Position(3, 2 * txn[1] + 1), lambda: Position(3, 0))
    for txn in arrival[:10]:  # a replay of what is already held adds nothing
        processor.put_aborted(txn, Position(3, 2 * txn[1] + 1), lambda: Position(3, 0))
    assert processor.aborted_count() == len(txns) and len(processor.indexes) >= 10
    for txn in txns:
        assert processor.is_aborted(txn, Position(3, 2 * txn[1])), txn
    assert not processor.is_aborted((0, 1000), Position(3, 0))
    service.close()


CRASH_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from test_tb_snapshots import engine_for, run_txns
    engine = engine_for(Path({path!r}), "segmented")
    engine.subscribe({topic!r}, "s")
    import json, os
    aborted = run_txns(engine, "a" * {before})["a"]
    last = engine.begin()
    engine.produce(last, {topic!r}, b"last")
    print(json.dumps(aborted + [list(last)]), flush=True)
    os.environ["TXNADMIN_CRASH_POINT"] = "after-segment-write"
    engine.abort(last)  # seals the second segment, then dies before the index names it
    raise SystemExit("the crash point did not fire")
""")


def test_crash_between_segment_write_and_index_update(tmp_path):
    child = CRASH_CHILD.format(tests=str(Path(__file__).parent), path=str(tmp_path), topic=TOPIC,
                               before=2 * CAPACITY - 1)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 137, proc.stderr
    engine = engine_for(tmp_path, "segmented")
    processor = engine.topic(TOPIC).buffer.processor
    segments = engine.snapshots.segments("public/default")
    # the orphan (sequence 1) was re-sealed from the replay under the same key; nothing is lost or doubled
    assert [i.sequence_id for i in processor.indexes] == [0, 1]
    assert processor.aborted_count() == 2 * CAPACITY and not processor.unsealed
    assert sorted(segments.keys()) == [segment_key(0, TOPIC), segment_key(1, TOPIC)]
    entries = segments.ledger.internal_stats()["numberOfEntries"]
    assert entries == 3  # segment 0, the orphan, segment 1 again
    live = {p for p in _index_positions(engine)}
    assert segments.cursor.is_deleted(Position(min(live).ledger_id, 1))  # the orphan entry is dead
    aborted = [tuple(t) for t in json.loads(proc.stdout)]
    assert len(aborted) == 2 * CAPACITY
    assert all(processor.is_aborted(t) for t in aborted)
    assert payloads(engine) == []
    engine.close()


def test_upgrade_from_single_snapshots(tmp_path):
    engine = engine_for(tmp_path, "single", transactionBufferSnapshotMaxTransactionCount="1")
    engine.subscribe(TOPIC, "s")
    txns = run_txns(engine, "acaaaaacaa")
    assert len(latest(engine, SNAPSHOT_TOPIC)["aborts"]) == 8
    engine.close()
    engine = engine_for(tmp_path, "segmented")
    tb = stats.transaction_buffer_stats(engine, TOPIC, segment_stats=True)
    assert tb["snapshotType"] == "Segment" and tb["totalAbortedTransactions"] == 8
    assert tb["segmentsStats"]["segmentsSize"] == 2 and tb["segmentsStats"]["unsealedAbortTxnIDSize"] == 0
    assert payloads(engine) == ["c1", "c7"]
    assert all(engine.topic(TOPIC).buffer.is_aborted(t) for t in txns["a"])
    engine.close()
    # and it stays segmented across a further restart, now from its own index
    engine = engine_for(tmp_path, "segmented")
    assert engine.topic(TOPIC).buffer.processor.aborted_count() == 8
    assert payloads(engine) == ["c1", "c7"]
    engine.close()


def test_shared_reader_reads_each_namespace_log_once(factory):
    writer = SnapshotService(factory, lambda: None)
    topics = [f"persistent://public/default/t{i}" for i in range(5)]
    expected = {}
    for round_ in range(3):  # interleaved: t0 t1 … t4, three times, the latest value wins
        for i, topic in enumerate(topics):
            if round_ == 2 and i % 2:
                continue
            expected[topic] = {"round": round_}
            writer.write("public/default", SNAPSHOT_TOPIC, topic, expected[topic])
    writer.write("public/default", SNAPSHOT_TOPIC, topics[4], None)  # a tombstone deletes
    del expected[topics[4]]
    entries = 5 + 5 + 3 + 1
    writer.close()
    for shared, reads in [(True, entries), (False, entries * len(topics))]:
        service = SnapshotService(factory, lambda: None, shared_reader=shared)
        for topic in reversed(topics):
            assert service.read_latest("public/default", SNAPSHOT_TOPIC, topic) == expected.get(topic)
        assert service.recovery_reads[SNAPSHOT_TOPIC] == reads
        assert service.read_latest("public/default", INDEXES_TOPIC, topics[0]) is None  # never created
        service.close()
    assert not factory.exists(SnapshotService.ledger_name("public/default", INDEXES_TOPIC))


@pytest.mark.parametrize("shared", [True, False])
def test_engine_recovery_reads_m_times_x_with_the_shared_reader(tmp_path, shared):
    namespaces, per_ns = ["t/a", "t/b"], 4
    names = [f"persistent://{ns}/topic{i}" for ns in namespaces for i in range(per_ns)]
    engine = engine_for(tmp_path, "single", transactionBufferSnapshotMaxTransactionCount="1")
    for name in names:  # interleave writes of every topic in its namespace log
        run_txns(engine, "a", topic=name)
    for name in names:
        run_txns(engine, "ca", topic=name)
    before = {n: sorted(engine.topic(n).buffer.processor.aborts) for n in names}
    log_entries = sum(engine.snapshots.keyed(ns, SNAPSHOT_TOPIC).ledger.internal_stats()["numberOfEntries"]
                      for ns in namespaces)
    engine.close()
    engine = engine_for(tmp_path, "single", engineTransactionBufferSharedSnapshotReader=str(shared).lower())
    assert {n: sorted(engine.topic(n).buffer.processor.aborts) for n in names} == before
    reads = engine.snapshots.recovery_reads[SNAPSHOT_TOPIC]
    assert reads == (log_entries if shared else log_entries * per_ns)
    engine.close()


def test_snapshot_segment_metrics(tmp_path):
    """TxnSnapshotSegmentStats' names and labels: ops per namespace and topic_name, segments held per topic."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    def samples(engine):
        text = generate_latest(engine.registry).decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def op(name, op, namespace="public/default"):
        return (name, (("namespace", namespace), ("op", op), ("status", "success"), ("topic_name", TOPIC)))

    per_topic = (("namespace", "public/default"), ("topic", TOPIC))
    engine = engine_for(tmp_path, "segmented", managedLedgerMaxEntriesPerLedger="4")
    engine.subscribe(TOPIC, "s")
    run_txns(engine, "a" * 9)
    got = samples(engine)
    assert got[op("pulsar_txn_tb_snapshot_segment_op_total", "add")] == 2
    assert got[op("pulsar_txn_tb_snapshot_index_op_total", "add")] == 2
    assert got[("pulsar_txn_tb_snapshot_index_entry_bytes_count", per_topic)] == 2
    assert got[("pulsar_txn_tb_snapshot_index_total", per_topic)] == 2
    payloads(engine)
    engine.sweep_ledgers()
    got = samples(engine)
    deleted = got[op("pulsar_txn_tb_snapshot_segment_op_total", "del")]
    assert deleted >= 1
    assert got[("pulsar_txn_tb_snapshot_index_total", per_topic)] == 2 - deleted
    engine.close()


def test_downgrade_to_single_snapshots_recovers_exactly(tmp_path):
    """Turning segments off again: the (stale) single snapshot plus the replay still give every abort."""
    engine = engine_for(tmp_path, "single", transactionBufferSnapshotMaxTransactionCount="2")
    engine.subscribe(TOPIC, "s")
    first = run_txns(engine, "aa")
    engine.close()
    engine = engine_for(tmp_path, "segmented")
    later = run_txns(engine, "acaaaaa")
    engine.close()
    engine = engine_for(tmp_path, "single")
    buffer = engine.topic(TOPIC).buffer
    assert buffer.processor.snapshot_type == "Single"
    assert sorted(buffer.processor.aborts) == sorted(first["a"] + later["a"])
    assert payloads(engine) == ["c1"]
    engine.close()


def test_compaction_bounds_what_recovery_reads(factory):
    writer = SnapshotService(factory, lambda: None)
    topics = [f"persistent://public/default/t{i}" for i in range(3)]
    for n in range(1100):  # compaction runs after every 1,000 writes
        writer.write("public/default", SNAPSHOT_TOPIC, topics[n % 3], {"n": n})
    writer.close()
    reader = SnapshotService(factory, lambda: None)
    assert [reader.read_latest("public/default", SNAPSHOT_TOPIC, t)["n"] for t in topics] == [1098, 1099, 1097]
    assert reader.recovery_reads[SNAPSHOT_TOPIC] == 3 + 100  # the compacted table, then what came after
    reader.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_histories_with_restarts_and_processor_switches(tmp_path, seed):
    """Random transactions on two topics, restarts that switch processors; readers always see the model's view."""
    rng = random.Random(seed)
    topics = [TOPIC, "persistent://public/default/payments-eu"]
    mode = "single"
    clock = Clock()

    def open_mode(m):
        return engine_for(tmp_path, m, clock, transactionBufferSnapshotMaxTransactionCount=str(rng.choice([1, 3, 50])),
                          engineTransactionBufferSegmentCacheSize="1")

    engine = open_mode(mode)
    log: dict[str, list] = {t: [] for t in topics}  # per topic: (payload, txn or None) in publish order
    outcome: dict[tuple, str] = {}  # txn → "open" | "c" | "a"
    for t in topics:
        engine.subscribe(t, "s")
    for step in range(160):
        op = rng.random()
        open_txns = [t for t, o in outcome.items() if o == "open"]
        if op < 0.35:
            txn = engine.begin()
            outcome[txn] = "open"
            for _ in range(rng.randint(1, 3)):
                topic = rng.choice(topics)
                payload = f"m{step}-{len(log[topic])}"
                engine.produce(txn, topic, payload.encode())
                log[topic].append((payload, txn))
        elif op < 0.6 and open_txns:
            txn = rng.choice(open_txns)
            outcome[txn] = rng.choice("ca")
            (engine.commit if outcome[txn] == "c" else engine.abort)(txn)
        elif op < 0.7:
            topic = rng.choice(topics)
            payload = f"p{step}"
            engine.publish(topic, payload.encode())
            log[topic].append((payload, None))
        elif op < 0.8:
            clock.advance(6000)
            engine.snapshot_transaction_buffers()
        elif op < 0.88:
            engine.close()
            mode = rng.choice(list(MODES))
            engine = open_mode(mode)
        else:
            for topic in topics:
                assert payloads(engine, topic=topic) == _visible(log[topic], outcome), (seed, step, mode, topic)
    for topic in topics:
        assert payloads(engine, topic=topic) == _visible(log[topic], outcome), (seed, mode, topic)
        aborted = {t for t, o in outcome.items() if o == "a" and any(x == t for _, x in log[topic])}
        buffer = engine.topic(topic).buffer
        assert buffer.processor.aborted_count() == len(aborted)
        assert all(buffer.is_aborted(t) for t in aborted)
    engine.close()


def _visible(entries, outcome):
    """What a read-committed reader sees: everything up to the first still-open transaction, minus aborted ones."""
    out = []
    for payload, txn in entries:
        if txn is not None and outcome[txn] == "open":
            break
        if txn is None or outcome[txn] == "c":
            out.append(payload)
    return out


def test_the_shared_view_lets_a_snapshot_go_once_its_topic_has_recovered(tmp_path):
    names = [f"persistent://t/a/topic{i}" for i in range(3)]
    engine = engine_for(tmp_path, "single", transactionBufferSnapshotMaxTransactionCount="1")
    for name in names:
        run_txns(engine, "aa", topic=name)
    engine.close()
    engine = engine_for(tmp_path, "single")
    view = engine.snapshots.keyed("t/a", SNAPSHOT_TOPIC)
    assert sorted(view.keys()) == names and view._values == {}  # every topic took its own; positions remain
    before = engine.snapshots.recovery_reads[SNAPSHOT_TOPIC]
    engine.reload_topic(names[1])  # a reload reads its snapshot back by position: one entry
    assert engine.snapshots.recovery_reads[SNAPSHOT_TOPIC] == before + 1
    assert engine.topic(names[1]).buffer.processor.aborted_count() == 2
    engine.close()


def test_recovery_that_drops_trimmed_segments_keeps_the_replay_start(tmp_path, monkeypatch):
    """Segments whose marker ledger went while the engine was down are dropped at recovery; the index written
    for that must keep the old replay start, or a transaction still open then would be lost on the next restart."""
    from txnadmin.engine.topic import Topic

    engine = engine_for(tmp_path, "segmented", managedLedgerMaxEntriesPerLedger="4")
    engine.subscribe(TOPIC, "s")
    run_txns(engine, "a" * 8)
    assert payloads(engine) == []
    still_open = engine.begin(3_600_000)
    engine.produce(still_open, TOPIC, b"open")
    engine.topic(TOPIC).buffer.take_snapshot()  # the index's replay start is just before the open message
    monkeypatch.setattr(Topic, "trim_expired_aborts", lambda self: 0)  # ledgers go, the index does not learn it
    engine.sweep_ledgers()
    first_marker = engine.topic(TOPIC).buffer.processor.indexes[0].marker
    assert first_marker.ledger_id < engine.topic(TOPIC).ledger.first_ledger_id  # its segment is due to go
    engine.close()
    monkeypatch.undo()
    engine = engine_for(tmp_path, "segmented", managedLedgerMaxEntriesPerLedger="4")  # drops trimmed segments
    first_live = engine.topic(TOPIC).ledger.first_ledger_id
    assert all(i["abortedMarkLedgerID"] >= first_live for i in latest(engine, INDEXES_TOPIC)["indexList"])
    engine.close()
    engine = engine_for(tmp_path, "segmented", managedLedgerMaxEntriesPerLedger="4")
    assert engine.topic(TOPIC).buffer.ongoing.keys() == {still_open}
    engine.abort(still_open)
    assert payloads(engine) == []  # the open transaction's message stays hidden once aborted
    engine.close()
