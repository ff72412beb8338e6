"""A transaction that acked on a subscription (or produced to a topic) deleted before it ended: the end completes and
what was deleted stays deleted.

Pulsar, since PR #11304 (2.8.1): ServerCnx.handleEndTxnOnSubscription answers the coordinator's end with success, and
touches nothing, when the topic is loaded but has no such subscription, or when the topic's managed ledger does not
exist at all; handleEndTxnOnPartition does the same for a topic that no longer exists. The coordinator
(TransactionMetadataStoreService.endTxnInTransactionBuffer) sees every end succeed and writes COMMITTED/ABORTED.
TransactionBufferClientTest.testEndTopicNotExist / testEndSubNotExist pin the broker side.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from txnadmin.admin.http import HttpAdmin
from txnadmin.cli.main import app
from txnadmin.engine.engine import Engine
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.faults import hold_ending

from engine_helpers import Clock, open_engine, served_engine

runner = CliRunner()

TOPIC = "persistent://public/default/orders"
GONE_TOPIC = "persistent://public/default/dropped"
ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"


def _cli(target: str, home, *args: str):
    return runner.invoke(app, ["-u", target, "transactions", *args], env={"TXNADMIN_HOME": str(home)})


def _txn_id(txn: tuple[int, int]) -> str:
    return f"({txn[0]},{txn[1]})"


def _acked_on_two_subscriptions(engine: Engine, timeout_ms: int = 3_600_000):
    """One message delivered to "gone" and to "kept", and one open transaction acking it on both."""
    for sub in ("gone", "kept"):
        engine.subscribe(TOPIC, sub)
    pos = engine.publish(TOPIC, b"m")
    for sub in ("gone", "kept"):
        assert [m.position for m in engine.receive(TOPIC, sub)] == [pos]
    txn = engine.begin(timeout_ms)
    for sub in ("gone", "kept"):
        engine.ack(txn, TOPIC, sub, [pos])
    return txn, pos


def _assert_ended(target: str, home, txn: tuple[int, int]) -> None:
    """The coordinator no longer holds the transaction (it reached COMMITTED/ABORTED and was dropped, as Pulsar's
    MLTransactionMetadataStore drops an ended one)."""
    meta = _cli(target, home, "transaction-metadata", "--txn-id", _txn_id(txn))
    assert meta.exit_code == 1 and "not found" in meta.output, meta.output
    stats = _cli(target, home, "coordinator-stats", "-c", str(txn[0]), "-o", "json")
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["ongoingTxnSize"] == 0


def _assert_ended_and_gone_stays_gone(url: str, home, txn: tuple[int, int]) -> None:
    """What an operator reads afterwards: the transaction ended, and neither the subscription nor its pending-ack
    store is listed again (the listings doctor and downgrade read)."""
    _assert_ended(url, home, txn)
    admin = HttpAdmin(url)
    assert sorted(admin.topic_stats(TOPIC)["subscriptions"]) == ["kept"]
    listed = admin.list_topics("public/default", True)
    assert f"{TOPIC}-kept__transaction_pending_ack" in listed, listed
    assert f"{TOPIC}-gone__transaction_pending_ack" not in listed, listed


def test_abort_transaction_after_its_subscription_was_deleted_ends_it_without_recreating_it(tmp_path):
    with served_engine(tmp_path, "4.2.5", coordinators=2) as (engine, url, home):
        txn, pos = _acked_on_two_subscriptions(engine)
        HttpAdmin(url).delete_subscription(TOPIC, "gone")
        aborted = _cli(url, home, "abort-transaction", "--txn-id", _txn_id(txn))
        assert aborted.exit_code == 0, aborted.output
        _assert_ended_and_gone_stays_gone(url, home, txn)
        # the subscription still there got its ack back: the message comes again
        assert [m.position for m in engine.receive(TOPIC, "kept")] == [pos]


def test_commit_after_an_acked_subscription_was_deleted_commits_on_the_others(tmp_path):
    with served_engine(tmp_path, "4.2.5", coordinators=2) as (engine, url, home):
        txn, _ = _acked_on_two_subscriptions(engine)
        HttpAdmin(url).delete_subscription(TOPIC, "gone")
        assert engine.commit(txn) == "COMMITTED"
        _assert_ended_and_gone_stays_gone(url, home, txn)
        engine.redeliver(TOPIC, "kept")
        assert engine.receive(TOPIC, "kept") == []  # acknowledged for good


def test_a_timeout_abort_after_the_subscription_was_deleted_ends_it(tmp_path):
    clock = Clock()
    with open_engine(tmp_path / "engine", clock) as engine:
        txn, _ = _acked_on_two_subscriptions(engine, timeout_ms=1_000)
        engine.delete_subscription(TOPIC, "gone")
        clock.advance(1_001)
        engine.maintenance_tick(sweep_ledgers=False)
    _assert_ended(f"local:{tmp_path / 'engine'}", tmp_path / "home", txn)
    with Engine(tmp_path / "engine", EngineConfig.load(tmp_path / "engine"), maintenance=False) as engine:
        # after a restart too: nothing brought the subscription or its store back
        assert engine.topic(TOPIC, create=False).subscriptions() == ["kept"]
        assert sorted(engine.stores) == [(TOPIC, "kept")]


def test_an_end_recovered_by_a_coordinator_reload_finishes_on_a_deleted_subscription(tmp_path):
    # doctor's fix for a transaction held in COMMITTING: unload the coordinator's assign partition; the recovery
    # drives the end, and must not bring back a subscription deleted while it was held
    with served_engine(tmp_path, "4.2.5", coordinators=2) as (engine, url, home):
        txn, _ = _acked_on_two_subscriptions(engine)
        hold_ending(engine, txn, commit=True)
        admin = HttpAdmin(url)
        admin.delete_subscription(TOPIC, "gone")
        admin.unload_topic(ASSIGN.format(txn[0]))
        _assert_ended_and_gone_stays_gone(url, home, txn)


@pytest.mark.parametrize("action", ["abort", "commit"])
def test_an_end_after_the_topic_was_deleted_does_not_create_it_again(tmp_path, action):
    with served_engine(tmp_path, "4.2.5", coordinators=2) as (engine, url, home):
        engine.subscribe(GONE_TOPIC, "sub")
        pos = engine.publish(GONE_TOPIC, b"m")
        engine.receive(GONE_TOPIC, "sub")
        txn = engine.begin(3_600_000)
        engine.produce(txn, GONE_TOPIC, b"t")
        engine.ack(txn, GONE_TOPIC, "sub", [pos])
        engine.subscribe(TOPIC, "late")
        engine.produce(txn, TOPIC, b"t")  # and a topic that stays
        admin = HttpAdmin(url)
        admin.delete_topic(GONE_TOPIC)
        if action == "abort":
            assert _cli(url, home, "abort-transaction", "--txn-id", _txn_id(txn)).exit_code == 0
        else:
            assert engine.commit(txn) == "COMMITTED"
        assert _cli(url, home, "transaction-metadata", "--txn-id", _txn_id(txn)).exit_code == 1
        listed = admin.list_topics("public/default", True)
        assert not [t for t in listed if t.startswith(GONE_TOPIC)], listed
        assert TOPIC in listed
        delivered = [m.payload for m in engine.receive(TOPIC, "late")]
        assert delivered == ([b"t"] if action == "commit" else [])
