"""One contract, two backends: LocalAdmin on an engine directory, and HttpAdmin talking to a real
`txnadmin serve` process on an identical copy. Every pulsar-admin subcommand runs through the CLI on both."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine
from serve_helpers import serving

runner = CliRunner()
TOPIC = "persistent://public/default/orders"
REFUNDS = "persistent://public/default/refunds"
ODD_NAMES = ["persistent://public/default/team/payouts", "persistent://public/default/50%off"]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    base = tmp_path_factory.mktemp("contract")
    src = base / "seed"
    config = EngineConfig()
    config.transactionCoordinatorCount = 2
    config.transactionLogBatchedWriteEnabled = True
    config.transactionBufferSnapshotMaxTransactionCount = 2  # REFUNDS' two aborts take a snapshot; ORDERS' one commit does not
    config.save(src)
    engine = Engine(src, EngineConfig.load(src), maintenance=False)
    engine.subscribe(TOPIC, "billing")
    first = engine.publish(TOPIC, b"m0")
    engine.publish(TOPIC, b"m1")
    done = engine.begin(60_000, tc_id=0)
    engine.produce(done, TOPIC, b"committed")
    engine.commit(done)
    open_txn = engine.begin(3_600_000, owner="contract", tc_id=1)
    engine.produce(open_txn, TOPIC, b"pending")
    engine.receive(TOPIC, "billing", 1)
    engine.ack(open_txn, TOPIC, "billing", [first])
    for odd in ODD_NAMES:  # a "/" and a "%" in the local name: sent encoded, routed intact
        engine.subscribe(odd, "audit")
        engine.publish(odd, b"plain")
    for _ in range(2):
        refund = engine.begin(60_000, tc_id=0)
        engine.produce(refund, REFUNDS, b"refund")
        engine.abort(refund)
    engine.close()
    local = base / "local"
    remote = base / "remote"
    shutil.copytree(src, local)
    shutil.copytree(src, remote)
    with serving(remote, base / "home") as (url, token):
        yield {"local": f"local:{local}", "http": url, "token": token, "open": open_txn, "first": first,
               "home": base / "home"}
    assert not (remote / "server.json").exists()  # removed on exit


BACKENDS = ["local", "http"]


def run(seeded, backend, *args):
    base = ["-u", seeded[backend]]
    if backend == "http":
        base += ["--auth-params", f"token:{seeded['token']}"]
    result = runner.invoke(__import__("txnadmin.cli.main", fromlist=["app"]).app, base + ["transactions", *args],
                           env={"TXNADMIN_HOME": str(seeded["home"])})
    return result


def shape(value):
    """Keys and value types, recursively: what must match between backends and with Pulsar's classes."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def both(seeded, *args):
    outs = {}
    for backend in BACKENDS:
        result = run(seeded, backend, *args)
        assert result.exit_code == 0, (backend, result.output)
        outs[backend] = result.stdout
    return outs


def both_json(seeded, *args):
    outs = {b: json.loads(o) for b, o in both(seeded, *args, "-o", "json").items()}
    assert shape(outs["local"]) == shape(outs["http"])
    return outs["local"]


def test_coordinators_list(seeded):
    outs = both(seeded, "coordinators-list")
    assert outs["local"] == outs["http"] == "0    pulsar://127.0.0.1:6650\n1    pulsar://127.0.0.1:6650\n"
    assert both_json(seeded, "coordinators-list") == [{"id": 0, "brokerServiceUrl": "pulsar://127.0.0.1:6650"},
                                                       {"id": 1, "brokerServiceUrl": "pulsar://127.0.0.1:6650"}]


def test_coordinator_stats(seeded):
    one = both_json(seeded, "coordinator-stats", "-c", "1")
    assert list(one) == ["state", "leastSigBits", "lowWaterMark", "ongoingTxnSize", "recoverStartTime",
                         "recoverEndTime"]
    assert one["ongoingTxnSize"] == 1
    outs = both(seeded, "coordinator-stats")
    for out in outs.values():
        assert re.match(r"0    TransactionCoordinatorStats\(state=Ready, leastSigBits=2, lowWaterMark=0, ", out)
    pretty = both(seeded, "coordinator-stats", "-c", "0")["local"]
    assert pretty.startswith('{\n  "state" : "Ready",\n  "leastSigBits" : 2,')


def test_coordinator_internal_stats(seeded):
    out = both_json(seeded, "coordinator-internal-stats", "-c", "0")
    stats = out["transactionLogStats"]
    assert stats["managedLedgerName"] == "pulsar/system/persistent/__transaction_log_0"
    ml = stats["managedLedgerInternalStats"]
    for key in ("entriesAddedCounter", "numberOfEntries", "totalSize", "currentLedgerEntries", "currentLedgerSize",
                "lastLedgerCreatedTimestamp", "lastConfirmedEntry", "state", "ledgers", "cursors"):
        assert key in ml
    assert set(ml["ledgers"][0]) >= {"ledgerId", "entries", "size", "offloaded", "underReplicated"}
    with_meta = both_json(seeded, "coordinator-internal-stats", "-c", "0", "-m")
    assert "metadata" in with_meta["transactionLogStats"]["managedLedgerInternalStats"]["ledgers"][0]


def test_pending_ack_internal_stats_both_flag_spellings(seeded):
    a = both_json(seeded, "pending-ack-internal-stats", "-t", TOPIC, "--subscription-name", "billing")
    b = both_json(seeded, "pending-ack-internal-stats", "-t", "orders", "--sub-name", "billing")
    name = "public/default/persistent/orders-billing__transaction_pending_ack"
    assert a["pendingAckLogStats"]["managedLedgerName"] == b["pendingAckLogStats"]["managedLedgerName"] == name


def test_buffer_snapshot_internal_stats_is_pulsars_404(seeded):
    for backend in BACKENDS:
        result = run(seeded, backend, "buffer-snapshot-internal-stats", "-t", TOPIC)
        assert result.exit_code == 1
        assert "Reason: Transaction buffer Snapshot for the topic does not exist" in result.stderr


def test_single_snapshot_stats(seeded):
    tb = both_json(seeded, "transaction-buffer-stats", "-t", REFUNDS, "-s")
    assert tb["snapshotType"] == "Single" and tb["totalAbortedTransactions"] == 2 and "segmentsStats" not in tb
    assert tb["lastSnapshotTimestamps"] == 0  # taken by the seeding engine, not by this one
    internal = both_json(seeded, "buffer-snapshot-internal-stats", "-t", REFUNDS, "-m")
    assert list(internal) == ["snapshotType", "singleSnapshotSystemTopicInternalStats"]
    single = internal["singleSnapshotSystemTopicInternalStats"]
    assert single["managedLedgerName"] == "public/default/persistent/__transaction_buffer_snapshot"
    assert single["managedLedgerInternalStats"]["numberOfEntries"] == 1
    assert "metadata" in single["managedLedgerInternalStats"]["ledgers"][0]


def test_local_names_with_slash_and_percent(seeded):
    for odd in ODD_NAMES:
        tb = both_json(seeded, "transaction-buffer-stats", "-t", odd)
        assert tb["state"] == "Ready" and tb["ongoingTxnSize"] == 0
        errors = {b: run(seeded, b, "pending-ack-stats", "-t", odd, "-s", "nobody") for b in BACKENDS}
        assert {r.exit_code for r in errors.values()} == {1}
        assert errors["local"].stderr == errors["http"].stderr  # the engine's answer, not a routing 404
        assert odd in errors["http"].stderr


def test_transaction_buffer_and_pending_ack_stats(seeded):
    tb = both_json(seeded, "transaction-buffer-stats", "-t", TOPIC, "-l")
    assert set(tb) >= {"state", "maxReadPosition", "lastSnapshotTimestamps", "lowWaterMarks", "ongoingTxnSize",
                       "recoverStartTime", "recoverEndTime", "snapshotType", "totalAbortedTransactions"}
    assert tb["ongoingTxnSize"] == 1
    pa = both_json(seeded, "pending-ack-stats", "-t", TOPIC, "-s", "billing")
    assert list(pa) == ["state", "ongoingTxnSize", "recoverStartTime", "recoverEndTime"]


def test_transaction_level_stats(seeded):
    most, least = map(str, seeded["open"])
    inbuf = both_json(seeded, "transaction-in-buffer-stats", "-m", most, "-l", least, "-t", TOPIC)
    assert set(inbuf) == {"startPosition", "aborted"} and inbuf["aborted"] is False
    inack = both_json(seeded, "transaction-in-pending-ack-stats", "-m", most, "-l", least, "-t", TOPIC, "-s", "billing")
    assert inack == {}  # cumulativeAckPosition is null and omitted
    meta = both_json(seeded, "transaction-metadata", "-m", most, "-l", least)
    assert meta["txnId"] == f"({most},{least})" and meta["status"] == "OPEN" and meta["owner"] == "contract"
    assert meta["timeoutAt"] == 3_600_000
    assert meta["producedPartitions"] == {TOPIC: inbuf} and meta["ackedPartitions"] == {TOPIC: {"billing": {}}}


def test_slow_transactions_map_lines(seeded):
    outs = both(seeded, "slow-transactions", "-t", "0s")
    for out in outs.values():
        assert out.startswith(f"({seeded['open'][0]},{seeded['open'][1]})    TransactionMetadata(txnId=")
    assert both(seeded, "slow-transactions", "-t", "2h")["local"] == ""  # timeouts of 1 h are not "greater"
    for backend in BACKENDS:
        bad = run(seeded, backend, "slow-transactions", "-t", "5x")
        assert bad.exit_code == 1 and "Invalid time unit 'x'" in bad.stderr


def test_position_stats_in_pending_ack_prints_its_result(seeded):
    first = seeded["first"]
    out = both_json(seeded, "position-stats-in-pending-ack", "-t", TOPIC, "-s", "billing", "-l",
                    str(first.ledger_id), "-e", str(first.entry_id))
    assert out == {"state": "PendingAck"}


def test_batch_log_commands(seeded):
    stat = both_json(seeded, "get-txn-tc-batch-log-stat")
    assert stat["txnTcBatchLogEnabled"] is True and stat["coodinatorArray"] == [{"0": True}, {"1": True}]
    for backend in BACKENDS:
        result = run(seeded, backend, "set-txn-tc-batch-log", "--disable")
        assert result.exit_code == 0 and "reads this flag only when a store opens" in result.stdout
    # The live server's coordinators opened before the change and keep batching until reloaded; a local: command
    # reads the stopped engine as it is (no reopen): its coordinators last opened with batching on, too.
    served = json.loads(run(seeded, "http", "get-txn-tc-batch-log-stat", "-o", "json").stdout)
    assert served["txnTcBatchLogEnabled"] is False and served["coodinatorArray"] == [{"0": True}, {"1": True}]
    assert served["reopenedSinceChange"] == {"0": False, "1": False} and served["derived"].startswith("derived")
    local = json.loads(run(seeded, "local", "get-txn-tc-batch-log-stat", "-o", "json").stdout)
    assert local["coodinatorArray"] == [{"0": True}, {"1": True}]
    assert local["reopenedSinceChange"] == {"0": False, "1": False}
    reload = run(seeded, "http", "set-txn-tc-batch-log", "--disable", "--reload", "--yes")
    assert reload.exit_code == 0 and "reloaded 2 coordinators" in reload.stdout
    served = json.loads(run(seeded, "http", "get-txn-tc-batch-log-stat", "-o", "json").stdout)
    assert served["coodinatorArray"] == [{"0": False}, {"1": False}]
    acks = both_json(seeded, "get-txn-pending-ack-batch-log-stat")
    assert acks["txnPendingAckBatchLogEnabled"] is False
    assert acks["subscriptionArray"][0]["subscription"] == "billing"


def test_list_and_find_hanging(seeded):
    rows = both_json(seeded, "list")
    assert [r["txnId"] for r in rows] == [f"({seeded['open'][0]},{seeded['open'][1]})"]
    assert rows[0]["owner"] == "contract"
    for backend in BACKENDS:
        none = run(seeded, backend, "find-hanging", "--max-transaction-timeout", "60", "-o", "json")
        assert none.exit_code == 0 and json.loads(none.stdout) == []
        hanging = run(seeded, backend, "find-hanging", "--max-transaction-timeout", "0", "-o", "json")
        assert hanging.exit_code == 1
        assert "abort-transaction" in json.loads(hanging.stdout)[0]["abortCommand"]


def test_usage_errors_and_missing_things_exit_1(seeded):
    for backend in BACKENDS:
        missing = run(seeded, backend, "transaction-metadata", "-m", "0", "-l", "424242")
        assert missing.exit_code == 1 and "Reason:" in missing.stderr
        gone = run(seeded, backend, "pending-ack-stats", "-t", "nope", "-s", "x")
        assert gone.exit_code == 1 and "Topic not found" in gone.stderr


def test_zz_scale_and_abort_mutate_both_the_same_way(seeded):
    most, least = map(str, seeded["open"])
    for backend in BACKENDS:
        assert run(seeded, backend, "scale-transactionCoordinators", "-r", "3").exit_code == 0
        assert run(seeded, backend, "scale-transactionCoordinators").exit_code == 1  # 0 is refused, as in Pulsar
        assert run(seeded, backend, "abort-transaction", "-m", most, "-l", least).stdout == ""
    assert len(both_json(seeded, "coordinators-list")) == 3
    for backend in BACKENDS:
        assert run(seeded, backend, "transaction-metadata", "-m", most, "-l", least).exit_code == 1


def test_doctor_reads_the_same_on_both_backends(seeded):
    """The calls `doctor` added to the seam: a topic's internal stats, the target's clock, its /metrics."""
    import time
    from pathlib import Path

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.admin.local import LocalAdmin
    from txnadmin.admin.protocol import NotFoundError

    http = HttpAdmin(seeded["http"], token=seeded["token"])
    with LocalAdmin(Path(seeded["local"][len("local:"):])) as local:
        answers = {}
        for name, admin in (("local", local), ("http", http)):
            internal = admin.topic_internal_stats(TOPIC)
            assert set(internal["cursors"]) == {"billing"}
            with pytest.raises(NotFoundError):
                admin.topic_internal_stats("persistent://public/default/nobody")
            clock = admin.broker_time_ms()
            assert abs(clock - time.time() * 1000) < 5000  # the Date header counts whole seconds
            assert "pulsar_txn_active_count" in admin.metrics_text()
            answers[name] = internal
        assert shape(answers["local"]) == shape(answers["http"])
        for internal in answers.values():  # the two copies roll ledgers on each reopen, so positions differ
            assert re.fullmatch(r"\d+:-?\d+", internal["lastConfirmedEntry"])
    http.close()
