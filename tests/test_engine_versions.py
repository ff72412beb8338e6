"""The engine behaves as the Pulsar version it claims (`engineBrokerVersion`), on both sides of each boundary.

Pending-ack store names: PR #25727 (5.0.0) and its cherry-pick #25728 (listed in the 4.2.2 release notes, in no 4.0.x
or 4.1.x notes) URL-encode the subscription. Before them a subscription holding `/` cannot open its store. The
batched writer's thresholds do not move with the version: each rule is checked at two claimed versions."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engine_helpers import open_engine
from txnadmin.cli.main import app
from txnadmin.engine.engine import EngineError
from txnadmin.names import encodes_pending_ack_subscription

runner = CliRunner()
TOPIC = "persistent://public/default/payouts"
ODD = "public/functions/payout fn"  # a Pulsar Function's subscription: tenant/namespace/name
# (claimed version, encodes the subscription): the pairs either side of 4.0.13/4.0.14, 4.2.1/4.2.2 (#25728),
# 4.2.4/4.2.5 and 4.x/5.0.0
VERSIONS = [("4.0.13", False), ("4.0.14", False), ("4.1.2", False), ("4.2.1", False), ("4.2.2", True),
            ("4.2.4", True), ("4.2.5", True), ("5.0.0", True)]


@pytest.mark.parametrize(("version", "encodes"), VERSIONS)
def test_the_release_notes_decide_which_versions_encode(version, encodes):
    assert encodes_pending_ack_subscription(version) is encodes


def test_an_unreadable_version_is_taken_as_before_the_fix():
    assert encodes_pending_ack_subscription("garbage") is False
    assert encodes_pending_ack_subscription("5.0.0-M1") is True


def _acked(engine, subscription):
    engine.subscribe(TOPIC, subscription)
    engine.publish(TOPIC, b"m")
    txn = engine.begin(60_000)
    msg = engine.receive(TOPIC, subscription, 1)[0]
    engine.ack(txn, TOPIC, subscription, [msg.position])
    return engine.store(TOPIC, subscription)


@pytest.mark.parametrize(("version", "encodes"), VERSIONS)
def test_a_subscription_holding_a_slash_opens_its_store_only_from_the_fix(tmp_path, version, encodes):
    with open_engine(tmp_path, engineBrokerVersion=version) as engine:
        plain = _acked(engine, "billing")
        assert plain.store_topic == f"{TOPIC}-billing__transaction_pending_ack"  # the same name at every version
        if encodes:
            store = _acked(engine, ODD)
            assert store.store_topic == f"{TOPIC}-public%2Ffunctions%2Fpayout+fn__transaction_pending_ack"
            assert store.name == "public/default/persistent/payouts-public%252Ffunctions%252Fpayout%2Bfn" \
                "__transaction_pending_ack"
        else:
            with pytest.raises(EngineError, match="Invalid topic name"):
                _acked(engine, ODD)
            assert (TOPIC, ODD) not in engine.stores  # nothing recorded: it stays unopened after a restart too


ODD_LEDGER = "public/default/persistent/payouts-public%252Ffunctions%252Fpayout%2Bfn__transaction_pending_ack"


@pytest.mark.parametrize(("version", "ledger"), [("4.2.1", None), ("4.2.2", ODD_LEDGER), ("5.0.0", ODD_LEDGER)])
def test_the_store_is_found_under_the_name_its_version_gives_it(tmp_path, version, ledger):
    """Through the CLI on the engine's files: the store's internal stats name the managed ledger the version names."""
    d = tmp_path / "e"
    with open_engine(d, engineBrokerVersion=version) as engine:
        _acked(engine, "billing")
        if ledger is not None:
            _acked(engine, ODD)
    result = runner.invoke(app, ["-u", f"local:{d}", "transactions", "pending-ack-internal-stats", "-t", TOPIC,
                                 "-s", ODD, "-o", "json"])
    if ledger is None:
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    else:
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["pendingAckLogStats"]["managedLedgerName"] == ledger


# -- the batched writer's thresholds (TxnLogBufferedWriter, TransactionBatchedWriteValidator) -------------------------

def _entries_of_log(engine, tc_id: int = 0) -> list[bool]:
    """Whether each entry of coordinator ``tc_id``'s log is a batch (0E 01 prefix), in order."""
    from txnadmin.codec import decode_entry
    from txnadmin.engine.position import Position

    ml = engine.coordinators[tc_id].log.ledger
    out = []
    for info in ml.ledgers():
        for entry_id in range(info.entries or 0):
            out.append(decode_entry(ml.read_entry(Position(info.ledger_id, entry_id)), "txn-log").batched)
    return out


@pytest.mark.parametrize("version", ["4.0.13", "5.0.0"])
@pytest.mark.parametrize(("max_records", "batches"), [(1, False), (5, True)])
def test_batching_turned_on_later_takes_thresholds_the_startup_check_never_saw(tmp_path, version, max_records,
                                                                                batches):
    """engine.conf: batching off, max records below the minimum of 10 (the startup check skips a disabled writer).
    Turning batching on through dynamic config is accepted; the writer batches only with max records above 1."""
    from txnadmin.engine.config import EngineConfig
    from txnadmin.engine.engine import Engine

    d = tmp_path / "e"
    init = runner.invoke(app, ["engine", "init", str(d), "-c", "1", "--set", f"engineBrokerVersion={version}",
                               "--set", f"transactionLogBatchedWriteMaxRecords={max_records}"])
    assert init.exit_code == 0, init.output
    switched = runner.invoke(app, ["engine", "set", "transactionLogBatchedWriteEnabled", "true", "--dir", str(d)])
    assert switched.exit_code == 0, switched.output
    engine = Engine(d, EngineConfig.load(d), maintenance=False)
    try:
        assert engine.config.transactionLogBatchedWriteEnabled
        for _ in range(3):
            engine.begin(60_000, tc_id=0)  # one record each, flushed by the max delay when batching
        logged = _entries_of_log(engine)
    finally:
        engine.close()
    assert logged and set(logged) == {batches}  # every entry a batch (0E 01 prefix), or every one plain


@pytest.mark.parametrize("version", ["4.0.13", "5.0.0"])
def test_thresholds_are_not_dynamic(tmp_path, version):
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1", "--set",
                               f"engineBrokerVersion={version}"]).exit_code == 0
    for key in ("transactionLogBatchedWriteMaxRecords", "transactionPendingAckBatchedWriteMaxSize",
                "transactionLogBatchedWriteMaxDelayInMillis"):
        result = runner.invoke(app, ["engine", "set", key, "100", "--dir", str(d)])
        assert result.exit_code == 2, result.output
        assert f"Can't update non-dynamic configuration {key}" in result.stderr


@pytest.mark.parametrize("version", ["4.0.13", "5.0.0"])
def test_the_minimum_is_the_startup_check_on_the_file_while_batching_is_on_there(tmp_path, version):
    """Batching on in engine.conf with 5 max records: refused as the broker refuses to start (exit 2, nothing saved);
    a file written by hand that way does not open either."""
    from txnadmin.engine.config import CONF_FILE, ConfigError, EngineConfig

    d = tmp_path / "e"
    result = runner.invoke(app, ["engine", "init", str(d), "-c", "1", "--set", f"engineBrokerVersion={version}",
                                 "--set", "transactionLogBatchedWriteEnabled=true",
                                 "--set", "transactionLogBatchedWriteMaxRecords=5"])
    assert result.exit_code == 2 and "greater than or equal to 10" in result.stderr, result.output
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    conf = d / CONF_FILE
    conf.write_text(conf.read_text().replace("transactionLogBatchedWriteEnabled=false",
                                             "transactionLogBatchedWriteEnabled=true").replace(
        "transactionLogBatchedWriteMaxRecords=512", "transactionLogBatchedWriteMaxRecords=5"))
    with pytest.raises(ConfigError, match="transactionLogBatchedWriteMaxRecords"):
        EngineConfig.load(d)
