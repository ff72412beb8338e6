"""A broker older than PIP-160 (before Pulsar 2.11) cannot read a batched entry, as Pulsar 2.10 cannot: a coordinator
whose replayed log holds one never recovers (404, its clients refused), a pending-ack store never leaves
Initializing, and the engine logs which log and entry stopped it. A batched entry the log already left behind
(trimmed, or before the cursor's mark-delete) is never read and does no harm: the end-to-end proof of the
downgrade's criterion."""

from __future__ import annotations

import logging

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import NotFoundError
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine
from txnadmin.engine.pending_ack import PendingAckNotReady

from engine_helpers import Clock, live_batched_entries_in, open_engine

TOPIC = "persistent://public/default/orders"
SUB = "billing"
BATCHING = {"transactionLogBatchedWriteEnabled": "true", "transactionPendingAckBatchedWriteEnabled": "true"}


def _traffic(engine: Engine, transactions: int = 3) -> None:
    """Transactions that produce and ack on TOPIC/SUB, committed: log records on both kinds of log."""
    engine.subscribe(TOPIC, SUB)
    for _ in range(transactions):
        engine.publish(TOPIC, b"m")
    for message in engine.receive(TOPIC, SUB, transactions):
        txn = engine.begin(tc_id=0)
        engine.produce(txn, TOPIC, b"x")
        engine.ack(txn, TOPIC, SUB, [message.position])
        engine.commit(txn)


def _reopen_as(directory, version: str, clock: Clock) -> Engine:
    config = EngineConfig.load(directory)
    config.set("engineBrokerVersion", version)
    config.save(directory)
    return Engine(directory, EngineConfig.load(directory), clock_ms=clock, maintenance=False)


def _open_txn_left_open(engine: Engine) -> None:
    """A transaction left open on coordinator 0 and an ack it holds: both logs keep live records for the replay."""
    engine.publish(TOPIC, b"held")
    message = engine.receive(TOPIC, SUB, 1)[0]
    txn = engine.begin(tc_id=0, timeout_ms=3_600_000)
    engine.ack(txn, TOPIC, SUB, [message.position])


def test_an_older_broker_cannot_replay_a_log_holding_a_batched_entry(tmp_path, caplog):
    d, clock = tmp_path / "e", Clock()
    engine = open_engine(d, clock, **BATCHING)
    _traffic(engine)
    _open_txn_left_open(engine)
    engine.close()
    assert live_batched_entries_in(d), "the setup must leave batched entries in live ledgers"

    with caplog.at_level(logging.ERROR):
        older = _reopen_as(d, "2.10.4", clock)
    try:
        failures = older.recovery_failures
        assert "tc/0" in failures and any(k.startswith("pending-ack/") for k in failures)
        tc_failure = failures["tc/0"]
        assert tc_failure.log_name.endswith("__transaction_log_0") and tc_failure.version == "2.10.4"
        assert f"{tc_failure.ledger_id}:{tc_failure.entry_id}" in caplog.text  # the log names the entry
        admin = LocalAdmin(older)
        with pytest.raises(NotFoundError, match="Transaction coordinator not found"):
            admin.coordinator_stats(0)
        assert "0" not in admin.coordinator_stats()  # left out of the listing, as Pulsar's store map leaves it
        assert admin.pending_ack_stats(TOPIC, SUB)["state"] == "Initializing"
        older.publish(TOPIC, b"later")
        message = older.receive(TOPIC, SUB, 1)
        txn = older.begin(tc_id=1)
        with pytest.raises(PendingAckNotReady):
            older.ack(txn, TOPIC, SUB, [message[0].position])
    finally:
        older.close()

    # The way back: the same data on a broker with PIP-160's reader recovers every log.
    again = _reopen_as(d, "4.0.12", clock)
    try:
        assert again.recovery_failures == {}
        assert LocalAdmin(again).coordinator_stats(0)["state"] == "Ready"
        assert LocalAdmin(again).pending_ack_stats(TOPIC, SUB)["state"] == "Ready"
    finally:
        again.close()


def test_an_older_broker_recovers_a_log_whose_batched_entries_are_behind_it(tmp_path):
    """Batching off, the logs move on: the batched entries fall behind the cursors (and their ledgers are trimmed),
    so an older broker never reads them and every log recovers on it."""
    d, clock = tmp_path / "e", Clock()
    engine = open_engine(d, clock, **BATCHING)
    _traffic(engine)
    engine.close()
    engine = open_engine(d, clock)  # batching off: every later record is plain
    _traffic(engine, transactions=12)  # small ledgers (5 entries): the batched ones roll over and are trimmed
    _open_txn_left_open(engine)
    for _ in range(3):  # rollover, then trim what the cursors left behind
        engine.sweep_ledgers()
    engine.close()
    assert not live_batched_entries_in(d), "the setup must leave no batched entry in a live ledger"

    older = _reopen_as(d, "2.10.4", clock)
    try:
        assert older.recovery_failures == {}
        admin = LocalAdmin(older)
        assert admin.coordinator_stats(0)["state"] == "Ready"
        assert admin.pending_ack_stats(TOPIC, SUB)["state"] == "Ready"
    finally:
        older.close()


def test_an_older_broker_writes_no_batched_entry_and_exports_no_writer_series(tmp_path):
    """A 2.10 broker has no batched writer: the batching flags in its configuration change nothing, and its
    /metrics has none of PIP-160's writer series (a current one, beside it, has them)."""
    from prometheus_client import generate_latest

    for version, writer in (("2.10.4", False), ("2.11.0", True)):
        d = tmp_path / version
        engine = open_engine(d, Clock(), engineBrokerVersion=version, **BATCHING)
        try:
            _traffic(engine)
            assert ("bufferedwriter" in generate_latest(engine.registry).decode()) is writer
        finally:
            engine.close()
        assert bool(live_batched_entries_in(d)) is writer
