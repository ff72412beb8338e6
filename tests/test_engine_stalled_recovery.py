"""A transaction buffer whose recovery starts and never ends (`engine run --fault stall-buffer-recovery`), held to
what Pulsar's TopicTransactionBuffer does while it is Initializing: stats answer with the recovery's start and no
end, transactional sends wait (and fail when the topic closes), ends are refused retriably so the transaction stays
COMMITTING, consumers get nothing (getMaxReadPosition is EARLIEST), and the rest of the engine goes on."""

from __future__ import annotations

import threading

import pytest

from txnadmin.engine.engine import Engine
from txnadmin.engine.faults import STALLED_TOPIC, stall_buffer_recovery
from txnadmin.engine.manage import init_engine
from txnadmin.engine.topic import TransactionBufferNotReady

OTHER = "persistent://public/default/healthy"


@pytest.fixture
def engine(tmp_path):
    init_engine(tmp_path / "e")
    with Engine(tmp_path / "e", maintenance=False) as e:
        yield e


def test_a_stalled_buffer_reports_initializing_and_holds_transactional_work(engine):
    engine.subscribe(STALLED_TOPIC, "sub")
    pending = engine.begin(60_000)
    engine.produce(pending, STALLED_TOPIC, b"before")  # produced before the unload, ended after it
    stall_buffer_recovery(engine, STALLED_TOPIC)
    topic = engine.topic(STALLED_TOPIC)
    stats = topic.buffer_stats()
    assert stats["state"] == "Initializing"
    assert stats["recoverStartTime"] > 0 and stats["recoverEndTime"] == 0
    lac = str(topic.ledger.last_confirmed_entry)
    assert stats["maxReadPosition"] == lac  # the last confirmed entry when it loaded

    # a plain publish is stored but does not move the max read position; consumers are given nothing
    engine.publish(STALLED_TOPIC, b"plain")
    assert topic.buffer_stats()["maxReadPosition"] == lac
    assert engine.receive(STALLED_TOPIC, "sub") == []

    # a transactional send waits for the buffer (bounded by the client's send timeout)
    txn = engine.begin(60_000)
    with pytest.raises(TransactionBufferNotReady, match="still Initializing"):
        topic.wait_ready(timeout_s=0.2)

    # an end on a transaction that produced there stays COMMITTING: refused retriably, not parked on a thread
    other = engine.begin(60_000)
    engine.produce(other, OTHER, b"elsewhere")  # the rest of the engine goes on
    assert engine.commit(other) == "COMMITTED"
    with pytest.raises(TransactionBufferNotReady, match="not Ready"):
        engine.commit(pending)
    assert engine.coordinator(pending[0]).get(pending[1]).status_name == "COMMITTING"

    # a sender waiting when the topic closes fails with "Topic is closed", as Pulsar fails its parked sends
    failures: list[BaseException] = []

    def send():
        try:
            engine.produce(txn, STALLED_TOPIC, b"waits")
        except BaseException as exc:  # noqa: BLE001 — the test reads it
            failures.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    sender.join(0.3)
    assert sender.is_alive()  # still waiting for the buffer
    # the fix doctor gives: unload the topic, whose new recovery finishes
    engine.reload_topic(STALLED_TOPIC)
    sender.join(10)
    assert not sender.is_alive() and failures and "Topic is closed" in str(failures[0])
    recovered = engine.topic(STALLED_TOPIC).buffer_stats()
    assert recovered["state"] == "Ready" and recovered["recoverEndTime"] >= recovered["recoverStartTime"] > 0
    assert engine.retry_failed_ends(now_ms=engine.clock_ms() + 10_000) == 1  # the held commit now ends
    assert [m.payload for m in engine.receive(STALLED_TOPIC, "sub")] == [b"before", b"stall-buffer-recovery", b"plain"]


def test_a_send_parked_on_a_stalled_buffer_does_not_hold_the_other_clients_of_its_driver(engine):
    # The workload runs many clients on one thread (ops.drive): a send waiting for an Initializing buffer is parked,
    # not blocking that thread, so the driver's other clients commit meanwhile; closing the topic fails the send.
    from txnadmin.engine.ops import Sleep, drive

    stall_buffer_recovery(engine, STALLED_TOPIC)
    stuck_txn = engine.begin(60_000)
    committed: list[tuple[int, int]] = []

    def stuck():
        yield from engine.produce_async(stuck_txn, STALLED_TOPIC, b"waits")

    def healthy():
        for _ in range(5):
            txn = yield from engine.begin_async(60_000)
            yield from engine.produce_async(txn, OTHER, b"goes on")
            yield from engine.commit_async(txn)
            committed.append(txn)

    def unload_when_done():
        while len(committed) < 5:
            yield Sleep(0.01)
        engine.reload_topic(STALLED_TOPIC)  # the fix doctor gives: the parked send fails with "Topic is closed"

    results: list = []
    driver = threading.Thread(target=lambda: results.extend(drive([stuck(), healthy(), unload_when_done()])),
                              daemon=True)
    driver.start()
    driver.join(20)  # far below the 30 s send timeout: the healthy client did not wait for the stalled one
    assert not driver.is_alive()
    assert len(committed) == 5 and results[1:] == [None, None]
    assert isinstance(results[0], TransactionBufferNotReady) and "Topic is closed" in str(results[0])
