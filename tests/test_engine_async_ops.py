"""A client's sends and acks issued together and awaited once (sendAsync / acknowledgeAsync), as the workload does:
the order guarantees of the one-at-a-time calls hold, checked on the logs the engine wrote."""

from __future__ import annotations

import pytest

from txnadmin.codec import TxnOp, decode_entry
from txnadmin.engine.coordinator import InvalidTxnStatus
from txnadmin.engine.ops import gather, run
from txnadmin.engine.pending_ack import PendingAckConflict
from txnadmin.engine.position import Position

from engine_helpers import open_engine

T1, T2 = "persistent://public/default/a", "persistent://public/default/b"


def _tc_records(engine, tc_id: int) -> list[tuple[int, object]]:
    """(entry index, record) of every record in the coordinator's log, in log order, read back from storage."""
    engine.storage.flush()
    log = engine.coordinator(tc_id).log
    out = []
    for index, (_pos, payload) in enumerate(log.ledger.entries_after(Position(log.ledger.first_ledger_id, -1))):
        out += [(index, rec) for rec in decode_entry(payload, "txn-log").records]
    return out


def test_gather_returns_each_result_or_exception_in_order():
    def ok(value):
        got = yield (lambda: value * 2)
        return got + 1

    def fails():
        yield (lambda: 1)
        raise ValueError("second step")

    def wait_fails():
        try:
            yield (lambda: (_ for _ in ()).throw(KeyError("wait")))
        except KeyError:
            return "handled"

    results = gather([ok(1), fails(), wait_fails(), ok(5)])
    assert results[0] == 3 and isinstance(results[1], ValueError) and results[2] == "handled" and results[3] == 11
    with pytest.raises(ValueError, match="second step"):
        run(fails())


@pytest.mark.parametrize("batched", [False, True])
def test_sends_and_an_ack_together_commit_like_one_at_a_time(tmp_path, batched):
    flag = "true" if batched else "false"
    # A long max delay: ticks are 50 ms apart, so at most one can fall between the registrations a gather queues one
    # right after the other, and at least two of the three share an entry.
    engine = open_engine(tmp_path / "e", transactionLogBatchedWriteEnabled=flag,
                         transactionPendingAckBatchedWriteEnabled=flag, managedLedgerMaxEntriesPerLedger=1000,
                         transactionLogBatchedWriteMaxDelayInMillis=50)
    try:
        engine.subscribe(T1, "s")
        first = engine.publish(T1, b"to ack")
        txn = engine.begin(tc_id=0)
        results = gather([engine.produce_async(txn, T1, b"m1"), engine.produce_async(txn, T2, b"m2"),
                          engine.produce_async(txn, T1, b"m3"), engine.ack_async(txn, T1, "s", [first])])
        assert not [r for r in results if isinstance(r, BaseException)], results
        assert results[0] < results[2]  # two sends to one topic keep their order
        engine.commit(txn)
        records = _tc_records(engine, 0)
        adds = [(i, r) for i, r in records if r.metadata_op in (TxnOp.ADD_PARTITION, TxnOp.ADD_SUBSCRIPTION)]
        # one ADD_PARTITION per topic, however many sends, and every one before the COMMITTING record
        assert sorted(p for _, r in adds for p in r.partitions) == [T1, T2]
        assert sum(1 for _, r in adds if r.metadata_op == TxnOp.ADD_SUBSCRIPTION) == 1
        committing = next(i for i, r in records if r.metadata_op == TxnOp.UPDATE)
        assert all(i <= committing for i, _ in adds)
        if batched:  # issued together, the registrations share batched entries
            assert len({i for i, _ in adds}) < len(adds)
        # the messages sit before their commit markers, and are delivered; the ack reached the subscription
        engine.subscribe(T2, "s")
        assert engine.topic(T1).subscription("s").is_deleted(first)
        assert engine.coordinator(0).stats()["ongoingTxnSize"] == 0
        # every record of the ended transaction was deleted from the log's cursor, the registrations included
        log = engine.coordinator(0).log
        assert log.cursor.mark_delete_position == log.ledger.last_confirmed_entry
    finally:
        engine.close()


def test_a_send_issued_before_an_abort_never_lands_after_its_marker(tmp_path):
    engine = open_engine(tmp_path / "e", managedLedgerMaxEntriesPerLedger=1000)
    try:
        txn = engine.begin(tc_id=0)
        op = engine.produce_async(txn, T1, b"late")
        first = op.send(None)  # the registration is queued: the coordinator knows the topic
        engine.abort(txn)  # say the timeout: the marker goes to the registered topic
        first()
        with pytest.raises(InvalidTxnStatus):
            op.send(None)
        topic = engine.topic(T1)
        assert topic.buffer.stats()["ongoingTxnSize"] == 0
        # nothing but the abort marker was written to the topic
        engine.storage.flush()
        entries = list(topic.ledger.entries_after(Position(topic.ledger.first_ledger_id, -1)))
        assert len(entries) == 1 and b"TXN_ABORT" in entries[0][1]
    finally:
        engine.close()


def test_a_refused_ack_in_a_gather_leaves_the_sends_and_the_transaction_usable(tmp_path):
    engine = open_engine(tmp_path / "e", managedLedgerMaxEntriesPerLedger=1000)
    try:
        engine.subscribe(T1, "s")
        message = engine.publish(T1, b"m")
        holder = engine.begin()
        engine.ack(holder, T1, "s", [message])
        txn = engine.begin()
        results = gather([engine.produce_async(txn, T1, b"x"), engine.ack_async(txn, T1, "s", [message])])
        assert not isinstance(results[0], BaseException) and isinstance(results[1], PendingAckConflict)
        assert engine.abort(txn) == "ABORTED" and engine.commit(holder) == "COMMITTED"
    finally:
        engine.close()


def test_the_max_read_position_follows_the_oldest_ongoing_transaction_whatever_order_they_end_in():
    # The buffer keeps its oldest ongoing position cached (asked at every receive): ends in any order, and a start
    # below the cached one, must give what the minimum over every ongoing transaction gives.
    import random
    from types import SimpleNamespace

    from txnadmin.engine.topic import TransactionBuffer

    ledger = SimpleNamespace(last_confirmed_entry=Position(3, 999))
    buffer = TransactionBuffer(ledger, processor=None)  # commits only: the processor is never asked
    rng = random.Random(5)
    ongoing: dict = {}
    entry = 0
    for step in range(3000):
        if ongoing and rng.random() < 0.5:
            txn = rng.choice(sorted(ongoing))
            del ongoing[txn]
            buffer.on_marker(txn, True, Position(3, 2000 + step))
        else:
            entry += rng.randint(1, 3)
            # now and then a position below every one seen so far (the cache must not assume increasing adds)
            pos = Position(3, entry) if rng.random() < 0.9 else Position(2, rng.randint(0, 500))
            txn = (0, step)
            ongoing[txn] = pos
            buffer.on_message(txn, pos)
            buffer.on_message(txn, Position(3, entry + 1))  # a later message of the same transaction changes nothing
        expected = Position(min(ongoing.values()).ledger_id, min(ongoing.values()).entry_id - 1) if ongoing \
            else ledger.last_confirmed_entry
        assert buffer.max_read_position() == expected, step
