"""The guided downgrade on the real engine through LocalAdmin, with the traps an operator meets."""

from __future__ import annotations

import json

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.procedures.downgrade import DowngradeError, start, status
from txnadmin.procedures.downgrade.checklist import load_state

from engine_helpers import Clock, open_engine

BATCHED = {"transactionLogBatchedWriteEnabled": "true", "transactionPendingAckBatchedWriteEnabled": "true",
           "transactionLogBatchedWriteMaxDelayInMillis": "1", "transactionPendingAckBatchedWriteMaxDelayInMillis": "1"}


def traffic(engine, n: int, topic: str = "t", sub: str = "s") -> None:
    engine.subscribe(topic, sub)
    for _ in range(n):
        txn = engine.begin(60_000)
        engine.produce(txn, topic, b"x")
        got = engine.receive(topic, sub, 1)
        if got:
            engine.ack(txn, topic, sub, [got[0].position])
        engine.commit(txn)
    engine.maintenance_tick()


def test_start_records_last_batched_and_waits_until_trimmed(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        traffic(engine, 30)
        admin = LocalAdmin(engine)
        before = {tc: max(l["ledgerId"] for l in engine.coordinator(tc).internal_stats()
                          ["transactionLogStats"]["managedLedgerInternalStats"]["ledgers"]) for tc in (0, 1)}
        state = start(admin, tmp_path / "state.json", "local:test")
        assert state["phase"] == "recorded"
        assert {int(k): v["lastBatchedLedgerId"] for k, v in state["coordinators"].items()} == before
        store = "persistent://public/default/t-s__transaction_pending_ack"
        assert state["pendingAckStores"][store]["topic"] == "persistent://public/default/t"
        assert admin.runtime_config()["transactionLogBatchedWriteEnabled"] == "false"
        assert all(not tc.log.writer_config.enabled for tc in engine.coordinators.values())  # reloaded
        report = status(admin, tmp_path / "state.json")
        assert not report.safe
        assert {l.component for l in report.waiting} <= {"coordinator", "pending-ack"}
        traffic(engine, 40)
        report = status(admin, tmp_path / "state.json")
        assert report.safe, [l.to_json() for l in report.waiting]
        for log in report.logs:
            assert log.done and (log.oldest_ledger_id is None or log.oldest_ledger_id > log.last_batched_ledger_id)


def test_a_long_open_transaction_keeps_it_waiting_and_is_named(tmp_path):
    clock = Clock()
    with open_engine(tmp_path / "e", clock, **BATCHED) as engine:
        pinned = engine.begin(3_600_000, tc_id=0, owner="stuck-app")
        traffic(engine, 30)
        admin = LocalAdmin(engine)
        start(admin, tmp_path / "s.json")
        traffic(engine, 40)
        report = status(admin, tmp_path / "s.json")
        assert not report.safe
        tc0 = next(l for l in report.logs if l.name == "__transaction_log_0")
        assert not tc0.done and f"({pinned[0]},{pinned[1]})" in tc0.reason and "stuck-app" in tc0.reason
        assert tc0.suggestion == f"txnadmin transactions abort-transaction -m {pinned[0]} -l {pinned[1]}"
        admin.abort_transaction(__import__("txnadmin.admin.protocol", fromlist=["TxnId"]).TxnId(*pinned))
        traffic(engine, 20)
        assert status(admin, tmp_path / "s.json").safe


def test_open_ledger_not_rolled_is_the_reason(tmp_path):
    with open_engine(tmp_path / "e", managedLedgerMaxEntriesPerLedger="1000", **BATCHED) as engine:
        traffic(engine, 5)
        admin = LocalAdmin(engine)
        start(admin, tmp_path / "s.json")
        traffic(engine, 3)
        report = status(admin, tmp_path / "s.json")
        # Every log that waits says why, in one of the live view's groups.
        assert all(l.reason and l.kind != "done" for l in report.waiting)
        assert report.safe or report.groups()


def test_batching_switched_back_on_mid_wait_stops_with_a_clear_error(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        traffic(engine, 10)
        admin = LocalAdmin(engine)
        start(admin, tmp_path / "s.json")
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        with pytest.raises(DowngradeError, match="switched back on.*transactionLogBatchedWriteEnabled=true"):
            status(admin, tmp_path / "s.json")
        state = start(admin, tmp_path / "s.json")  # start again: disables and re-records what reopened
        assert state["phase"] == "recorded" and admin.runtime_config()["transactionLogBatchedWriteEnabled"] == "false"


def test_rerunning_start_resumes_and_new_or_deleted_stores(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        traffic(engine, 10)
        admin = LocalAdmin(engine)
        first = start(admin, tmp_path / "s.json")
        traffic(engine, 5, topic="later", sub="s2")  # a store created after start
        second = start(admin, tmp_path / "s.json")
        for key, value in first["coordinators"].items():
            assert second["coordinators"][key]["lastBatchedLedgerId"] == value["lastBatchedLedgerId"]
        later = "persistent://public/default/later-s2__transaction_pending_ack"
        assert later in second["pendingAckStores"]


def test_status_needs_a_started_checklist(tmp_path):
    with open_engine(tmp_path / "e") as engine:
        with pytest.raises(DowngradeError, match="downgrade start"):
            status(LocalAdmin(engine), tmp_path / "none.json")


def test_checklist_is_valid_json_after_every_step(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        traffic(engine, 5)
        start(LocalAdmin(engine), tmp_path / "s.json")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data.pop("digest").startswith("sha256:")  # what tells a file edited by hand
    assert data == load_state(tmp_path / "s.json") and data["version"] == 1
