"""The batched log writer on a real managed ledger and real storage (TxnLogBufferedWriter semantics)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from txnadmin.codec import TransactionMetadataEntry, TxnOp, decode_entry
from txnadmin.engine.buffered_writer import BufferedWriter, BufferedWriterConfig, TxnPosition, WriterClosedError
from txnadmin.engine.managed_ledger import ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerStorage
from txnadmin.engine.writer_metrics import BufferedWriterMetrics

HOUR_MS = 3_600_000.0  # a max delay that never fires during a test: flushes come from counts and sizes only


@pytest.fixture
def ledger(tmp_path):
    storage = LedgerStorage.open(tmp_path)
    ml = ManagedLedgerFactory(storage).open("pulsar/system/persistent/__transaction_log_0")
    yield ml
    ml.close()
    storage.close()


def record(seq: int, pad: int = 0) -> bytes:
    rec = TransactionMetadataEntry(metadata_op=TxnOp.NEW, txnid_most_bits=0, txnid_least_bits=seq,
                                   timeout_ms=1000, start_time=1, last_modification_time=1, max_local_txn_id=seq)
    if pad:
        rec.owner = "x" * pad
    return rec.SerializeToString()


class Collector:
    def __init__(self, expected: int):
        self.results: list[tuple[int, TxnPosition | None, BaseException | None]] = []
        self.done = threading.Event()
        self.expected = expected
        self.lock = threading.Lock()

    def cb(self, index: int):
        def callback(pos, exc):
            with self.lock:
                self.results.append((index, pos, exc))
                if len(self.results) >= self.expected:
                    self.done.set()
        return callback

    def wait(self):
        assert self.done.wait(20), f"only {len(self.results)} of {self.expected} callbacks arrived"
        return self.results


def make_writer(ledger, registry=None, **cfg):
    metrics = BufferedWriterMetrics("pulsar_txn_tc", registry or CollectorRegistry())
    config = BufferedWriterConfig(**{"enabled": True, "max_records": 10, "max_size": 131072,
                                     "max_delay_ms": HOUR_MS, **cfg})
    return BufferedWriter(ledger, config, metrics, name="test"), metrics


def entries(ledger):
    out = []
    for info in ledger.ledgers():
        for pos, data in ledger.read_entries(Position(info.ledger_id, 0), 10_000):
            if pos.ledger_id == info.ledger_id:
                out.append((pos, data))
    return out


def test_max_records_flush_positions_and_order(ledger):
    writer, metrics = make_writer(ledger)
    col = Collector(20)
    for i in range(20):
        writer.add(record(i), col.cb(i))
    results = col.wait()
    assert [i for i, _, _ in results] == list(range(20))  # callbacks in write order
    positions = [p for _, p, _ in results]
    assert {(p.batch_size) for p in positions} == {10}
    assert [p.batch_index for p in positions] == list(range(10)) * 2
    assert positions[0].position != positions[10].position
    assert metrics.flush_counts()["max_records"] == 2
    decoded = [decode_entry(d, "txn-log") for _, d in entries(ledger)]
    assert all(d.batched for d in decoded)
    assert [r.txnid_least_bits for d in decoded for r in d.records] == list(range(20))
    writer.close()


def test_ack_set_of_a_batched_position():
    assert TxnPosition(1, 2, 3, 1).ack_set() == [0b101]
    assert TxnPosition(1, 2, 1, 0).ack_set() is None
    words = TxnPosition(1, 2, 70, 64).ack_set()
    assert words == [-1, (1 << 6) - 2]  # word 0 all ones (signed -1), bit 64 cleared in word 1
    assert TxnPosition(1, 2, 3, 1).position == TxnPosition(1, 2, 9, 0).position


def test_max_size_flush(ledger):
    writer, metrics = make_writer(ledger, max_records=1000, max_size=131072)
    big = record(0, pad=40_000)
    col = Collector(4)
    for i in range(4):
        writer.add(big, col.cb(i))
    results = col.wait()
    assert metrics.flush_counts()["max_size"] == 1  # 4 × ~40 KB crosses 128 KiB on the fourth
    assert {p.batch_size for _, p, _ in results} == {4}
    writer.close()


def test_large_record_flushes_the_buffer_then_goes_plain(ledger):
    writer, metrics = make_writer(ledger, max_records=1000, max_size=131072)
    col = Collector(3)
    writer.add(record(1), col.cb(0))
    writer.add(record(2), col.cb(1))
    writer.add(record(3, pad=140_000), col.cb(2))
    results = col.wait()
    assert metrics.flush_counts()["large_data"] == 1  # the forced flush; the large record is not observed
    small, large = results[0][1], results[2][1]
    assert small.batch_size == 2 and large.batch_size == 1
    datas = entries(ledger)
    assert decode_entry(datas[0][1]).batched and not decode_entry(datas[1][1]).batched
    writer.close()


def test_delay_tick_flushes_a_batch_of_one_still_prefixed(ledger):
    writer, metrics = make_writer(ledger, max_delay_ms=5)
    pos = writer.add_sync(record(7))
    assert pos.batch_size == 1 and pos.ack_set() is None
    assert metrics.flush_counts()["max_delay"] == 1
    data = ledger.read_entry(pos.position)
    assert data[:4] == b"\x0e\x01\x00\x01"  # old brokers cannot read even a batch of one
    writer.close()


def test_disabled_writes_plain_and_records_no_metrics(ledger):
    registry = CollectorRegistry()
    writer, metrics = make_writer(ledger, registry, enabled=False)
    positions = [writer.add_sync(record(i)) for i in range(3)]
    assert [p.entry_id for p in positions] == [0, 1, 2]
    assert all(not decode_entry(ledger.read_entry(p.position)).batched for p in positions)
    assert sum(metrics.flush_counts().values()) == 0
    assert registry.get_sample_value("pulsar_txn_tc_bufferedwriter_batch_records_count", {"broker": "127.0.0.1:8080"}) == 0
    writer.close()


def test_runtime_toggle_applies_to_the_next_record(ledger):
    writer, _ = make_writer(ledger, enabled=False, max_delay_ms=2)
    plain = writer.add_sync(record(1))
    writer.update_config(BufferedWriterConfig(enabled=True, max_records=10, max_size=131072, max_delay_ms=2))
    batched = writer.add_sync(record(2))
    writer.update_config(BufferedWriterConfig(enabled=False))
    plain_again = writer.add_sync(record(3))
    forms = [decode_entry(ledger.read_entry(p.position)).form.value for p in (plain, batched, plain_again)]
    assert forms == ["plain", "batched", "plain"]
    writer.close()


@pytest.mark.parametrize("max_records", [1, 0, -3])
def test_max_records_of_one_or_less_is_accepted_and_writes_unbatched(ledger, max_records):
    """TxnLogBufferedWriter: batching is on only when enabled with max records above 1; no threshold is refused
    (the minimum of 10 is the broker's startup check on broker.conf, config.check_batched_write)."""
    writer, metrics = make_writer(ledger, max_records=max_records, max_size=1, max_delay_ms=0)
    positions = [writer.add_sync(record(i)) for i in range(3)]
    assert [p.batch_size for p in positions] == [1, 1, 1]
    assert all(not decode_entry(ledger.read_entry(p.position)).batched for p in positions)
    assert sum(metrics.flush_counts().values()) == 0
    writer.close()


def test_thresholds_below_the_startup_minimum_still_batch(ledger):
    writer, metrics = make_writer(ledger, max_records=3, max_size=131072)
    done = Collector(6)
    for i in range(6):
        writer.add(record(i), done.cb(i))
    results = sorted(done.wait())
    assert [pos.batch_size for _, pos, _ in results] == [3] * 6
    assert metrics.flush_counts()["max_records"] == 2
    writer.close()


def test_close_fails_buffered_and_later_records(ledger):
    writer, _ = make_writer(ledger, max_records=1000)
    col = Collector(3)
    writer.add(record(1), col.cb(0))
    writer.add(record(2), col.cb(1))
    writer.close()
    writer.add(record(3), col.cb(2))
    results = col.wait()
    assert all(isinstance(exc, WriterClosedError) for _, _, exc in results)
    assert str(results[0][2]) == "Transaction log buffered write has closed"
    assert writer.state == "CLOSED"
    assert entries(ledger) == []


def test_a_failed_write_fails_every_record_of_its_batch(tmp_path):
    storage = LedgerStorage.open(tmp_path)
    ml = ManagedLedgerFactory(storage).open("x")
    writer, _ = make_writer(ml, max_records=10)
    storage.close_ledger(ml.current_ledger_id)  # the ledger is fenced under the writer's feet
    col = Collector(10)
    for i in range(10):
        writer.add(record(i), col.cb(i))
    results = col.wait()
    assert len({type(exc) for _, _, exc in results}) == 1 and results[0][2] is not None
    assert all(pos is None for _, pos, _ in results)
    writer.close()
    storage.close()


def test_one_failing_callback_does_not_stop_the_rest(ledger, caplog):
    writer, _ = make_writer(ledger, max_records=10)
    col = Collector(9)

    def boom(pos, exc):
        raise RuntimeError("client bug")

    writer.add(record(0), boom)
    for i in range(1, 10):
        writer.add(record(i), col.cb(i))
    results = col.wait()
    assert all(exc is None for _, _, exc in results)
    writer.close()
    # not swallowed: the failure is logged, with the exception, by the writer that caught it
    (logged,) = [r for r in caplog.records if r.name == "txnadmin.engine.buffered_writer"]
    assert logged.levelname == "ERROR" and "callback failed" in logged.getMessage()
    assert logged.exc_info and str(logged.exc_info[1]) == "client bug"


class RaisingAppender:
    """A ledger whose add raises instead of calling back (a bug or a broken ledger below the writer)."""

    def __init__(self):
        self.calls = 0

    def add_entry_async(self, payload, callback):
        self.calls += 1
        raise OSError("disk went away")


def test_a_raising_append_on_the_timer_fails_the_batch_and_is_logged(caplog):
    appender = RaisingAppender()
    writer = BufferedWriter(appender, BufferedWriterConfig(enabled=True, max_records=100, max_size=131072,
                                                           max_delay_ms=5), name="tc-0")
    col = Collector(3)
    for i in range(3):
        writer.add(record(i), col.cb(i))  # below max records: only the timer thread flushes them
    results = col.wait()
    # every record's caller learns of the failure (the timer may split the three into more than one batch)
    assert [(pos, str(exc)) for _, pos, exc in sorted(results, key=lambda r: r[0])] == [(None, "disk went away")] * 3
    logged = [r for r in caplog.records if r.name == "txnadmin.engine.buffered_writer"]
    assert len(logged) == appender.calls  # each failed append logged once, with its exception
    assert all(r.levelname == "ERROR" and r.exc_info and str(r.exc_info[1]) == "disk went away" for r in logged)
    sizes = [int(r.getMessage().split("batch of ")[1].split()[0]) for r in logged]
    assert sum(sizes) == 3 and all("tc-0: writing a batch of" in r.getMessage() and "(max_delay flush)" in
                                   r.getMessage() for r in logged)
    writer.close()


def test_histograms_carry_pulsars_names_and_labels(ledger):
    registry = CollectorRegistry()
    writer, _ = make_writer(ledger, registry, max_records=10)
    col = Collector(10)
    for i in range(10):
        writer.add(record(i), col.cb(i))
    col.wait()
    labels = {"broker": "127.0.0.1:8080"}
    assert registry.get_sample_value("pulsar_txn_tc_bufferedwriter_batch_records_bucket", {**labels, "le": "10.0"}) == 1
    assert registry.get_sample_value("pulsar_txn_tc_bufferedwriter_batch_size_bytes_sum", labels) == \
        sum(len(record(i)) for i in range(10))
    assert registry.get_sample_value("pulsar_txn_tc_bufferedwriter_flush_trigger_max_records_total", labels) == 1
    assert registry.get_sample_value("pulsar_txn_tc_bufferedwriter_batch_oldest_record_delay_seconds_count",
                                     labels) == 1
    writer.close()


def test_writers_share_one_timer_thread_and_each_flushes_on_its_own_tick(tmp_path):
    """As Pulsar's writers share the broker's timer: 40 writers with records buffered add one thread, not 40,
    and a short max delay is not held up by a long one."""
    storage = LedgerStorage.open(tmp_path)
    factory = ManagedLedgerFactory(storage)
    ledgers = [factory.open(f"pulsar/system/persistent/__transaction_log_{i}") for i in range(41)]
    before = {t.name for t in threading.enumerate()}
    slow, _ = make_writer(ledgers[40], max_delay_ms=HOUR_MS)
    writers = [make_writer(ml, max_delay_ms=300)[0] for ml in ledgers[:40]]
    slow_done = Collector(1)
    slow.add(record(0), slow_done.cb(0))
    collector = Collector(80)
    for i, writer in enumerate(writers):
        writer.add(record(2 * i), collector.cb(2 * i))
        writer.add(record(2 * i + 1), collector.cb(2 * i + 1))
    results = collector.wait()
    assert all(exc is None for _, _, exc in results)
    new_threads = {t.name for t in threading.enumerate()} - before
    assert new_threads <= {"buffered-writer-timer"}
    # a writer's two records were buffered together and went out on its tick as one batch of two (unless a tick
    # of the fixed grid fell between the two adds, which a loaded machine can make happen now and then)
    assert sum(pos.batch_size == 2 for _, pos, _ in results) >= 60
    assert not slow_done.done.is_set()  # its hour-long delay has not passed
    slow.close()
    assert isinstance(slow_done.wait()[0][2], WriterClosedError)
    for writer in writers:
        writer.close()
    for ml in ledgers:
        ml.close()
    storage.close()
