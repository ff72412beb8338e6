"""Pending-ack stores: naming, records, commit/abort, cleanup by mark-delete, recovery, batching."""

from __future__ import annotations

from txnadmin.codec import PendingAckOp, decode_entry
from txnadmin.engine.position import Position

from engine_helpers import Clock, open_engine


def _store_records(store):
    out = []
    ml = store.ledger
    for info in ml.ledgers():
        last = info.entries if info.entries else 0
        for entry_id in range(last):
            decoded = decode_entry(ml.read_entry(Position(info.ledger_id, entry_id)), "pending-ack")
            out.append((decoded.form.value, [r.pending_ack_op for r in decoded.records]))
    return out


def test_store_naming_and_cursor_follow_pulsar(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("persistent://acme/orders/in", "billing")
        engine.publish("persistent://acme/orders/in", b"m")
        txn = engine.begin(60_000)
        msg = engine.receive("persistent://acme/orders/in", "billing", 1)[0]
        engine.ack(txn, "persistent://acme/orders/in", "billing", [msg.position])
        store = engine.store("persistent://acme/orders/in", "billing")
        assert store.store_topic == "persistent://acme/orders/in-billing__transaction_pending_ack"
        assert store.name == "acme/orders/persistent/in-billing__transaction_pending_ack"
        assert "__pending_ack_state" in store.internal_stats()["pendingAckLogStats"]["managedLedgerInternalStats"]["cursors"]


def test_ack_commit_abort_records_and_conflicts(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("t", "s")
        for i in range(4):
            engine.publish("t", bytes([i]))
        msgs = engine.receive("t", "s", 4)
        t1, t2 = engine.begin(60_000), engine.begin(60_000)
        engine.ack(t1, "t", "s", [msgs[0].position, msgs[1].position])
        engine.ack(t2, "t", "s", [msgs[2].position])
        store = engine.store("t", "s")
        import pytest

        from txnadmin.engine.pending_ack import PendingAckConflict

        with pytest.raises(PendingAckConflict):
            engine.ack(t2, "t", "s", [msgs[0].position])
        engine.commit(t1)
        engine.abort(t2)
        ops = [op for _, rec in _store_records(store) for op in rec]
        assert ops == [PendingAckOp.ACK, PendingAckOp.ACK, PendingAckOp.COMMIT, PendingAckOp.ABORT]
        cursor = engine.topic("t").subscription("s")
        assert cursor.mark_delete_position >= msgs[1].position
        # the aborted ack is released and the message is delivered again
        assert msgs[2].position in [m.position for m in engine.receive("t", "s", 10)]


def test_position_states(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("t", "s")
        p0 = engine.publish("t", b"0")
        p1 = engine.publish("t", b"1")
        engine.receive("t", "s", 2)
        txn = engine.begin(60_000)
        engine.ack(txn, "t", "s", [p1])
        from txnadmin.engine import stats

        assert stats.position_stats_in_pending_ack(engine, "t", "s", p1.ledger_id, p1.entry_id) == {"state": "PendingAck"}
        assert stats.position_stats_in_pending_ack(engine, "t", "s", p0.ledger_id, p0.entry_id) == {"state": "NotInPendingAck"}
        assert stats.position_stats_in_pending_ack(engine, "t", "s", 999, 0) == {"state": "InvalidPosition"}
        engine.commit(txn)
        assert stats.position_stats_in_pending_ack(engine, "t", "s", p1.ledger_id, p1.entry_id) == {"state": "MarkDelete"}


def test_log_is_cleaned_by_mark_delete_and_ledgers_trim(tmp_path):
    with open_engine(tmp_path) as engine:
        engine.subscribe("t", "s")
        for i in range(30):
            engine.publish("t", bytes([i]))
        for msg in engine.receive("t", "s", 30):
            txn = engine.begin(60_000)
            engine.ack(txn, "t", "s", [msg.position])
            engine.commit(txn)
        store = engine.store("t", "s")
        assert store.cursor.mark_delete_position > Position(-1, -1)
        engine.maintenance_tick()
        stats = store.internal_stats()["pendingAckLogStats"]["managedLedgerInternalStats"]
        live = [l["ledgerId"] for l in stats["ledgers"]]
        assert live[0] > 1 and len(live) <= 3  # 60 records at 5 per ledger: older ledgers trimmed


def test_pending_acks_survive_restart(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock) as engine:
        engine.subscribe("t", "s")
        p = engine.publish("t", b"x")
        engine.receive("t", "s", 1)
        txn = engine.begin(600_000)
        engine.ack(txn, "t", "s", [p])
    with open_engine(tmp_path, clock) as engine:
        store = engine.store("t", "s")
        assert store.is_held(p)
        assert store.pending_transactions() == [txn]
        engine.commit(txn)
        cursor = engine.topic("t").subscription("s")
        assert cursor.mark_delete_position >= p


def test_batched_pending_ack_log(tmp_path):
    opts = {"transactionPendingAckBatchedWriteEnabled": "true", "transactionPendingAckBatchedWriteMaxRecords": "10",
            "transactionPendingAckBatchedWriteMaxDelayInMillis": "1"}
    with open_engine(tmp_path, **opts) as engine:
        engine.subscribe("t", "s")
        p = engine.publish("t", b"x")
        engine.receive("t", "s", 1)
        txn = engine.begin(60_000)
        engine.ack(txn, "t", "s", [p])
        engine.commit(txn)
        forms = {form for form, _ in _store_records(engine.store("t", "s"))}
        assert forms == {"batched"}  # batches of one are still prefixed
