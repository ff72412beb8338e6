"""Coordinators on real engine storage: lifecycle, transitions, timeouts, recovery, trimming."""

from __future__ import annotations

import pytest

from txnadmin.codec import decode_entry
from txnadmin.engine.coordinator import (
    ABORTED, ABORTING, COMMITTED, COMMITTING, OPEN, InvalidTxnStatus, TransactionNotFound, can_transition,
)
from txnadmin.engine.position import Position

from engine_helpers import Clock, open_engine

ALL = [OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED]
ALLOWED = {
    OPEN: {OPEN, COMMITTING, ABORTING},
    COMMITTING: {COMMITTING, COMMITTED},
    ABORTING: {ABORTING, ABORTED},
    COMMITTED: {COMMITTED},
    ABORTED: {ABORTED},
}


@pytest.mark.parametrize("current", ALL)
@pytest.mark.parametrize("new", ALL)
def test_transition_table_is_pulsars(current, new):
    assert can_transition(current, new) == (new in ALLOWED[current])


def test_every_transition_through_a_coordinator(tmp_path):
    with open_engine(tmp_path) as engine:
        tc = engine.coordinator(0)
        commit = tc.new_transaction(60_000)
        abort = tc.new_transaction(60_000)
        with pytest.raises(InvalidTxnStatus):
            tc.update_status(commit.seq, COMMITTED, OPEN)  # must pass through COMMITTING
        tc.update_status(commit.seq, COMMITTING, OPEN)
        tc.update_status(commit.seq, COMMITTING, OPEN)  # no-op when already there
        with pytest.raises(InvalidTxnStatus):
            tc.update_status(commit.seq, ABORTING, OPEN)
        with pytest.raises(InvalidTxnStatus):
            tc.add_produced_partitions(commit.seq, ["persistent://public/default/t"])
        tc.update_status(commit.seq, COMMITTED, COMMITTING)
        with pytest.raises(TransactionNotFound):
            tc.get(commit.seq)  # ended transactions are dropped, as in Pulsar
        tc.update_status(abort.seq, ABORTING, OPEN)
        tc.update_status(abort.seq, ABORTED, ABORTING)
        assert tc.stats()["ongoingTxnSize"] == 0


def test_txn_ids_continue_across_restarts_and_trimming(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        ids = [engine.begin(1000, tc_id=0) for _ in range(12)]
        for txn in ids:
            engine.commit(txn)
        engine.maintenance_tick()
        assert [t[1] for t in ids] == list(range(12))
    with open_engine(tmp_path, clock) as engine:
        assert engine.begin(1000, tc_id=0) == (0, 12)
        assert engine.coordinator(0).stats()["leastSigBits"] == 12


def test_commit_writes_markers_applies_acks_and_deletes_log_records(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("orders", "billing")
        pre = [engine.publish("orders", f"m{i}".encode()) for i in range(3)]
        txn = engine.begin(60_000, owner="app")
        produced = engine.produce(txn, "orders", b"in-txn")
        got = engine.receive("orders", "billing", 3)
        assert [m.position for m in got] == pre
        engine.ack(txn, "orders", "billing", [m.position for m in got])
        meta = engine.coordinator(txn[0]).get(txn[1])
        assert meta.produced_partitions == ["persistent://public/default/orders"]
        assert meta.acked_partitions == [("persistent://public/default/orders", "billing")]
        # uncommitted: invisible to readers and the acks are held
        assert engine.receive("orders", "billing", 10) == []
        engine.commit(txn)
        topic = engine.topic("orders")
        cursor = topic.subscription("billing")
        assert all(cursor.is_deleted(p) or p <= cursor.mark_delete_position for p in pre)
        assert [m.payload for m in engine.receive("orders", "billing", 10)] == [b"in-txn"]
        assert produced == topic.buffer.max_read_position() or produced < topic.buffer.max_read_position()
        log_cursor = engine.coordinator(txn[0]).log.cursor
        for pos in meta.positions:
            assert log_cursor.is_deleted(pos.position) or pos.position <= log_cursor.mark_delete_position


def test_abort_hides_messages_and_redelivers_acked_ones(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("t", "s")
        first = engine.publish("t", b"a")
        txn = engine.begin(60_000)
        engine.produce(txn, "t", b"never")
        engine.ack(txn, "t", "s", [engine.receive("t", "s", 1)[0].position])
        engine.abort(txn)
        again = engine.receive("t", "s", 10)
        assert [m.payload for m in again] == [b"a"]
        assert again[0].position == first
        assert engine.topic("t").buffer.is_aborted(txn) and engine.topic("t").buffer.processor.aborted_count() == 1


def test_opposite_end_action_is_rejected(tmp_path):
    with open_engine(tmp_path) as engine:
        txn = engine.begin(60_000)
        tc = engine.coordinator(txn[0])
        tc.update_status(txn[1], ABORTING, OPEN)
        with pytest.raises(InvalidTxnStatus):
            engine.commit(txn)
        engine.abort(txn)  # the same action in progress continues
        with pytest.raises(TransactionNotFound):
            engine.commit(txn)


def test_timeouts_abort_open_transactions(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        short = engine.begin(1_000, tc_id=0)
        long = engine.begin(60_000, tc_id=0)
        clock.advance(999)
        assert engine.abort_timed_out() == []
        clock.advance(2)
        assert engine.abort_timed_out() == [short]
        with pytest.raises(TransactionNotFound):
            engine.coordinator(0).get(short[1])
        assert engine.coordinator(0).get(long[1]).status == OPEN


def test_timeouts_survive_a_restart(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        txn = engine.begin(5_000, tc_id=1)
    clock.advance(6_000)
    with open_engine(tmp_path, clock) as engine:
        assert engine.coordinator(1).get(txn[1]).status == OPEN
        assert engine.abort_timed_out() == [txn]


def _tc_ledgers(engine, tc_id=0):
    return [l["ledgerId"] for l in engine.coordinator(tc_id).internal_stats()["transactionLogStats"]
            ["managedLedgerInternalStats"]["ledgers"]]


def test_a_long_open_transaction_pins_trimming(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        pinned = engine.begin(3_600_000, tc_id=0)
        for _ in range(20):
            engine.commit(engine.begin(60_000, tc_id=0))
        engine.maintenance_tick()
        ledgers = _tc_ledgers(engine)
        assert len(ledgers) >= 4  # rolled every 5 entries, nothing trimmed
        first = ledgers[0]
        assert engine.coordinator(0).get(pinned[1]).positions[0].ledger_id == first
        engine.abort(pinned)
        engine.commit(engine.begin(60_000, tc_id=0))
        engine.maintenance_tick()
        after = _tc_ledgers(engine)
        assert first not in after
        assert len(after) < len(ledgers)


def test_recovery_of_a_log_mixing_batched_and_plain_entries(tmp_path):
    clock = Clock()
    batched = {"transactionLogBatchedWriteEnabled": "true", "transactionLogBatchedWriteMaxRecords": "10",
               "transactionLogBatchedWriteMaxDelayInMillis": "1"}
    with open_engine(tmp_path, clock, **batched) as engine:
        a = [engine.begin(600_000, tc_id=0) for _ in range(3)]
        engine.commit(a[0])
    with open_engine(tmp_path, clock) as engine:  # batching off now
        b = [engine.begin(600_000, tc_id=0) for _ in range(3)]
        engine.abort(b[0])
        forms = set()
        ml = engine.coordinator(0).log.ledger
        for info in ml.ledgers():
            for entry_id in range(info.entries):
                forms.add(decode_entry(ml.read_entry(Position(info.ledger_id, entry_id)), "txn-log").form.value)
        assert forms == {"batched", "plain"}
    with open_engine(tmp_path, clock, **batched) as engine:
        tc = engine.coordinator(0)
        open_now = sorted(m.seq for m in tc.snapshot())
        assert open_now == sorted([a[1][1], a[2][1], b[1][1], b[2][1]])
        assert all(m.status == OPEN for m in tc.snapshot())


def test_partially_deleted_batch_is_replayed_without_the_deleted_records(tmp_path):
    clock = Clock()
    batched = {"transactionLogBatchedWriteEnabled": "true", "transactionLogBatchedWriteMaxRecords": "10",
               "transactionLogBatchedWriteMaxDelayInMillis": "50"}
    import threading

    with open_engine(tmp_path, clock, **batched) as engine:
        tc = engine.coordinator(0)
        results = []
        threads = [threading.Thread(target=lambda: results.append(tc.new_transaction(600_000))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        positions = {m.positions[0].position for m in results}
        sizes = {m.positions[0].batch_size for m in results}
        victim = results[0]
        engine.abort((0, victim.seq))
    with open_engine(tmp_path, clock, **batched) as engine:
        recovered = sorted(m.seq for m in engine.coordinator(0).snapshot())
        assert recovered == sorted(m.seq for m in results[1:])
    assert max(sizes) >= 2 or len(positions) == 4  # the NEW records shared an entry when the timing allowed


def test_committing_transaction_is_driven_to_its_end_after_a_crash(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        engine.subscribe("t", "s")
        txn = engine.begin(600_000, tc_id=0)
        engine.produce(txn, "t", b"x")
        # the coordinator moved to COMMITTING, then the broker "died" before any marker
        engine.coordinator(0).update_status(txn[1], COMMITTING, OPEN)
    with open_engine(tmp_path, clock) as engine:
        with pytest.raises(TransactionNotFound):
            engine.coordinator(0).get(txn[1])
        assert [m.payload for m in engine.receive("t", "s", 10)] == [b"x"]


def test_stats_have_pulsars_shapes(tmp_path):
    with open_engine(tmp_path) as engine:
        txn = engine.begin(5000, owner="me", tc_id=1)
        engine.produce(txn, "t", b"x")
        s = engine.coordinator(1).stats()
        assert list(s) == ["state", "leastSigBits", "lowWaterMark", "ongoingTxnSize", "recoverStartTime",
                           "recoverEndTime"]
        assert s["state"] == "Ready" and s["ongoingTxnSize"] == 1
        internal = engine.coordinator(1).internal_stats()
        assert internal["transactionLogStats"]["managedLedgerName"] == "pulsar/system/persistent/__transaction_log_1"
        ml = internal["transactionLogStats"]["managedLedgerInternalStats"]
        assert "transaction.subscription" in ml["cursors"]
        assert ml["ledgers"][-1]["entries"] == 0  # the open ledger, listed as Pulsar lists it


def test_a_produce_racing_an_abort_cannot_land_after_the_marker(tmp_path, monkeypatch):
    """A message published after its transaction's marker would hold every reader of the topic forever."""
    import threading
    import time as _time

    from txnadmin.engine.coordinator import InvalidTxnStatus, TransactionNotFound
    from txnadmin.engine.topic import Topic

    with open_engine(tmp_path) as engine:
        engine.subscribe("t", "s")
        txn = engine.begin(60_000)
        engine.produce(txn, "t", b"first")
        slow = Topic.publish

        def slow_publish(self, payload, txn=None):
            if txn is not None:
                _time.sleep(0.3)  # the abort below arrives while this message is in flight
            return slow(self, payload, txn)

        monkeypatch.setattr(Topic, "publish", slow_publish)
        producer = threading.Thread(target=lambda: engine.produce(txn, "t", b"second"))
        producer.start()
        _time.sleep(0.1)
        engine.abort(txn)
        producer.join()
        buffer = engine.topic("t").buffer
        assert buffer.ongoing == {} and buffer.is_aborted(txn)
        engine.publish("t", b"after")
        assert [m.payload for m in engine.receive("t", "s", 10)] == [b"after"]
        again = engine.begin(60_000)
        engine.abort(again)
        with pytest.raises((InvalidTxnStatus, TransactionNotFound)):
            engine.produce(again, "t", b"late")


def test_a_replayed_id_only_ever_raises_the_sequence(tmp_path):
    with open_engine(tmp_path) as engine:
        log = engine.coordinator(0).log
        start = log.max_local_txn_id
        log.raise_max_local_txn_id(start + 10)
        log.raise_max_local_txn_id(start + 3)  # an older record replayed later must not lower it
        assert log.next_local_txn_id() == start + 11


def test_an_end_that_failed_part_way_is_retried_until_it_lands(tmp_path):
    """A commit whose pending-ack part fails (its store reloading) stays COMMITTING with its acks held; Pulsar's
    coordinator retries the end a second later until it lands. Without that retry the subscription's mark-delete,
    and with it the pending-ack log's trimming, would stop behind the held acks for good."""
    import pytest

    from engine_helpers import Clock, open_engine

    clock = Clock()
    topic = "persistent://public/default/retry"
    with open_engine(tmp_path, clock) as engine:
        engine.subscribe(topic, "sub")
        pos = engine.publish(topic, b"m")
        engine.receive(topic, "sub", 1)
        txn = engine.begin(600_000)
        engine.ack(txn, topic, "sub", [pos])
        store = engine.store(topic, "sub")
        real_end = store.end_async

        def closing(*_args, **_kwargs):
            raise RuntimeError("store closed under the end (reloading)")

        store.end_async = closing
        with pytest.raises(RuntimeError):
            engine.commit(txn)
        assert engine.coordinator(0).get(txn[1]).status_name == "COMMITTING"
        assert engine.retry_failed_ends() == 0  # not before a second has passed
        clock.advance(1000)
        assert engine.retry_failed_ends() == 0  # failing again: kept for the next tick
        store.end_async = real_end
        clock.advance(1000)
        assert engine.retry_failed_ends() == 1
        assert engine.topic(topic).subscription("sub").is_deleted(pos)
        assert not store.is_held(pos)
