"""PIP-255 on the engine: retried commits and aborts learn the real outcome."""

from __future__ import annotations

import pytest

from txnadmin.engine.coordinator import InvalidTxnStatus, TransactionNotFound

from engine_helpers import Clock, open_engine

ON = {"transactionMetaPersistCount": "3", "transactionMetaPersistTimeInHour": "1",
      "transactionMetaExpireCheckIntervalInSecond": "1"}


def test_retry_after_crash_succeeds_and_messages_are_visible_once(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock, **ON) as engine:
        engine.subscribe("t", "s")
        txn = engine.begin(60_000)
        engine.produce(txn, "t", b"only-once")
        assert engine.commit(txn, client_name="app-1") == "COMMITTED"
        # ... the response is lost and the broker crashes
    with open_engine(tmp_path, clock, **ON) as engine:
        assert engine.commit(txn, client_name="app-1") == "COMMITTED"
        assert [m.payload for m in engine.receive("t", "s", 10)] == [b"only-once"]


def test_opposite_action_is_a_clear_error(tmp_path):
    with open_engine(tmp_path, **ON) as engine:
        txn = engine.begin(60_000)
        engine.commit(txn, client_name="app")
        with pytest.raises(InvalidTxnStatus, match="already committed"):
            engine.abort(txn, client_name="app")
        other = engine.begin(60_000)
        engine.abort(other, client_name="app")
        with pytest.raises(InvalidTxnStatus, match="already aborted"):
            engine.commit(other, client_name="app")


def test_unknown_or_unpreserved_is_still_not_found(tmp_path):
    with open_engine(tmp_path, **ON) as engine:
        txn = engine.begin(60_000)
        engine.commit(txn)  # no client name: nothing preserved
        with pytest.raises(TransactionNotFound):
            engine.commit(txn, client_name="app")
        with pytest.raises(TransactionNotFound):
            engine.commit((0, 999), client_name="app")


def test_preserver_disabled_keeps_the_old_behaviour(tmp_path):
    with open_engine(tmp_path) as engine:
        txn = engine.begin(60_000)
        engine.commit(txn, client_name="app")
        with pytest.raises(TransactionNotFound):
            engine.commit(txn, client_name="app")
        assert engine.preservers == {}


def test_per_client_bound_evicts_oldest_and_counts(tmp_path):
    with open_engine(tmp_path, **ON) as engine:
        txns = [engine.begin(60_000, tc_id=0) for _ in range(5)]
        for t in txns:
            engine.commit(t, client_name="app")
        preserver = engine.preservers[0]
        assert preserver.evictions == 2
        with pytest.raises(TransactionNotFound):
            engine.commit(txns[0], client_name="app")
        assert engine.commit(txns[-1], client_name="app") == "COMMITTED"


def test_total_bound_across_clients(tmp_path):
    with open_engine(tmp_path, **ON, engineTransactionMetaPersistMaxTotal="4") as engine:
        for client in ("a", "b", "c"):
            for _ in range(2):
                engine.commit(engine.begin(60_000, tc_id=0), client_name=client)
        assert engine.preservers[0].total() == 4
        assert engine.preservers[0].evictions == 2


def test_expiry_is_its_own_retention(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock, **ON) as engine:
        txn = engine.begin(60_000, tc_id=0)
        engine.commit(txn, client_name="app")
        clock.advance(30 * 60_000)
        engine.maintenance_tick()
        assert engine.commit(txn, client_name="app") == "COMMITTED"
        clock.advance(31 * 60_000)
        engine.maintenance_tick()
        assert engine.preservers[0].expirations == 1
        with pytest.raises(TransactionNotFound):
            engine.commit(txn, client_name="app")
    with open_engine(tmp_path, clock, **ON) as engine:
        assert engine.preservers[0].total() == 0  # the expiry was persisted


def test_committing_counts_as_committed_before_the_final_record(tmp_path):
    clock = Clock()
    with open_engine(tmp_path, clock, **ON) as engine:
        txn = engine.begin(60_000, tc_id=0)
        preserver = engine.preservers[0]
        preserver.preserve("app", txn, "COMMITTED")
        from txnadmin.engine.coordinator import COMMITTING, OPEN

        engine.coordinator(0).update_status(txn[1], COMMITTING, OPEN)
        # crash here: COMMITTING is in the log, the outcome in the preserver
    with open_engine(tmp_path, clock, **ON) as engine:
        assert engine.commit(txn, client_name="app") == "COMMITTED"
        with pytest.raises(InvalidTxnStatus):
            engine.abort(txn, client_name="app")


def test_engine_txn_cli_retry_and_metadata(tmp_path):
    import json

    from typer.testing import CliRunner

    from txnadmin.admin.local import LocalAdmin
    from txnadmin.admin.protocol import TxnId
    from txnadmin.cli.main import app

    runner = CliRunner()
    d = str(tmp_path / "e")
    assert runner.invoke(app, ["engine", "init", d, "-c", "1", "--set", "transactionMetaPersistCount=10"]).exit_code == 0
    begun = json.loads(runner.invoke(app, ["engine", "txn", "begin", "--dir", d, "--produce", "t=hello"]).stdout)
    args = ["-m", str(begun["mostSigBits"]), "-l", str(begun["leastSigBits"]), "--client-name", "cli", "--dir", d]
    first = runner.invoke(app, ["engine", "txn", "commit", *args])
    assert first.exit_code == 0 and json.loads(first.stdout)["status"] == "COMMITTED"
    retry = runner.invoke(app, ["engine", "txn", "commit", *args])
    assert retry.exit_code == 0 and json.loads(retry.stdout)["status"] == "COMMITTED"
    wrong = runner.invoke(app, ["engine", "txn", "abort", *args])
    assert wrong.exit_code == 1 and "already committed" in wrong.stderr
    with LocalAdmin(tmp_path / "e") as admin:
        meta = admin.transaction_metadata(TxnId(begun["mostSigBits"], begun["leastSigBits"]))
    assert meta["status"] == "COMMITTED" and meta["preserved"] is True
