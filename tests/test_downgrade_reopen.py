"""Reopen judging: a log whose store reopened since `start` recorded it (someone else's unload, a broker restart,
batching switched on and off between two polls, a store still recovering) is never "safe" until `start` records it
again, and the re-record takes exactly the logs that reopened. In this process, and through the CLI against
`txnadmin serve` and a plain `-u local:PATH`."""

from __future__ import annotations

import json

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.procedures.downgrade import DowngradeError, Waiting, start, status

from downgrade_helpers import (
    BATCHED, T_STORE, TC_ASSIGN, TOKEN, TOPICS, U_STORE, checked_status, cli, engine_started, engine_traffic,
    fresh_engine, load, loaded_engine, local, report_of, running, serve_process, server_of, someone_else, traffic, until_safe, waiting_for,
)
from engine_helpers import live_batched_entries, live_batched_entries_in, open_engine


REOPENED = "reopened since recording"


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


@pytest.mark.slow
def test_reenabled_with_a_reload_between_two_polls_is_caught_and_rerecorded(tmp_path):
    with engine_started(tmp_path) as (engine, admin):
        # Someone switches batching on, reloads, writes batched entries into new ledgers, switches it off.
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "true")
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        for tc in range(2):
            admin.unload_topic(f"persistent://pulsar/system/transaction_coordinator_assign-partition-{tc}")
        admin.unload_topic("persistent://public/default/t")
        load(engine, 30)
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "false")
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        assert live_batched_entries(engine)
        for _ in range(4):
            report = checked_status(engine, admin, tmp_path / "s.json")
            assert not report.safe
            assert Waiting.REOPENED in report.groups()
            load(engine)
        state = start(admin, tmp_path / "s.json")
        assert state["rerecorded"] >= 3  # two coordinators and t's store, not every log
        assert until_safe(engine, admin, tmp_path / "s.json").safe


@pytest.mark.slow
def test_reenabled_between_polls_and_no_reload_through_serve(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path, d) as (url, _):
        started = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["target"] == {"url": url, "source": "--admin-url"}
        admin = HttpAdmin(url, token=TOKEN)
        # Between two polls: batching on, the stores reload and batch, batching off again.
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        admin.unload_topic(TC_ASSIGN.format(0))
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        polled = cli(url, "downgrade", "status", "--state", state, "-o", "json")
        assert polled.returncode == 1
        report = json.loads(polled.stdout)
        assert report["waitingByReason"]["reopened since recording"] == 1
        assert report["target"]["url"] == url and report["brokersChecked"]
        human = cli(url, "downgrade", "status", "--state", state)
        assert human.stdout.startswith(f"target: {url} (from --admin-url)")
        again = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert json.loads(again.stdout)["recordedThisRun"] == 1  # exactly the coordinator that reopened
        # Without a reload nothing is proven: every log waits for its store to reopen.
        noreload = cli(url, "downgrade", "start", "--yes", "--no-reload", "--state", str(tmp_path / "n.json"),
                       "-o", "json")
        assert noreload.returncode == 0, noreload.stderr
        waiting = json.loads(cli(url, "downgrade", "status", "--state", str(tmp_path / "n.json"), "-o", "json").stdout)
        assert waiting["safe"] is False and set(waiting["waitingByReason"]) == {"store not reopened"}
        admin.close()


@pytest.mark.slow
def test_reenabled_between_polls_and_no_reload_through_a_plain_local_target(tmp_path):
    d = fresh_engine(tmp_path)
    engine_traffic(d)
    state, noreload = str(tmp_path / "s.json"), str(tmp_path / "n.json")
    with running(d):
        started = local(d, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert report_of(started)["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        other = someone_else(d)
        # Between two polls: batching on, a coordinator reloads and batches under traffic, batching off again.
        other.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        other.unload_topic(TC_ASSIGN.format(0))
        other.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        polled = local(d, "downgrade", "status", "--state", state, "-o", "json")
        report = report_of(polled)
        assert polled.returncode == 1 and report["safe"] is False
        assert report["waitingByReason"]["reopened since recording"] == 1
        assert local(d, "downgrade", "status", "--state", state).stdout.startswith(f"target: local:{d} (from "
                                                                                   "--admin-url)")
        # Without a reload nothing is proven: every log waits for its store to reopen, however long the traffic.
        assert local(d, "downgrade", "start", "--yes", "--no-reload", "--state", noreload).returncode == 0
        waiting = local(d, "downgrade", "status", "--state", noreload, "-o", "json")
        assert waiting.returncode == 1 and report_of(waiting)["safe"] is False
        assert "store not reopened" in report_of(waiting)["waitingByReason"]
        assert set(report_of(waiting)["waitingByReason"]) <= {"store not reopened", "batched writer still flushing"}
        # start again: the coordinator that reopened batched under traffic, and the counters counted it, so every
        # log is re-recorded (which store wrote is unknown); then the wait can end.
        again = local(d, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert report_of(again)["countedFlushes"]
        assert report_of(again)["recordedThisRun"] == (report_of(again)["coordinators"]
                                                       + report_of(again)["pendingAckStores"])
        done = local(d, "downgrade", "wait", "--state", state, "--timeout", "90", "--interval", "0.5", "-o", "json")
        assert done.returncode == 0 and report_of(done)["safe"] is True, done.stderr
        other.close()
    assert live_batched_entries_in(d) == []


def test_a_store_reopened_by_someone_else_is_never_safe_until_rerecorded(tmp_path):
    with engine_started(tmp_path) as (engine, admin):
        engine.reload_topic("persistent://public/default/u")  # a broker restart, a bundle move …
        load(engine, 40)
        report = checked_status(engine, admin, tmp_path / "s.json")
        reopened = [l.name for l in report.groups().get(Waiting.REOPENED, [])]
        assert reopened == ["persistent://public/default/u-s__transaction_pending_ack"]
        assert not report.safe
        assert start(admin, tmp_path / "s.json")["rerecorded"] == 1
        assert until_safe(engine, admin, tmp_path / "s.json").safe


@pytest.mark.slow
def test_a_store_reopened_by_someone_else_through_serve(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
        # Someone else unloads a topic (a bundle move, a broker restart): its store reopens, flags off or not.
        HttpAdmin(url, token=TOKEN).unload_topic("persistent://public/default/u")
        polled = cli(url, "downgrade", "status", "--state", state, "-o", "json")
        report = report_of(polled)
        assert polled.returncode == 1 and report["safe"] is False
        assert waiting_for(report, REOPENED) == {U_STORE}  # exactly that store, nothing else
        again = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert again.returncode == 0 and report_of(again)["recordedThisRun"] == 1
        rerecorded = report_of(cli(url, "downgrade", "status", "--state", state, "-o", "json"))
        assert waiting_for(rerecorded, REOPENED) == set()


@pytest.mark.slow
def test_a_store_reopened_by_someone_else_through_local_engine_run(tmp_path):
    d = fresh_engine(tmp_path)
    engine_traffic(d)
    state = str(tmp_path / "s.json")
    with running(d):
        assert cli(f"local:{d}", "downgrade", "start", "--yes", "--state", state).returncode == 0
        url, token = server_of(d)
        HttpAdmin(url, token=token).unload_topic("persistent://public/default/txn-topic-0")
        polled = cli(f"local:{d}", "downgrade", "status", "--state", state, "-o", "json")
        report = report_of(polled)
        reopened = waiting_for(report, REOPENED)
        assert polled.returncode == 1 and reopened
        assert all(name.startswith("persistent://public/default/txn-topic-0-") for name in reopened)
        again = cli(f"local:{d}", "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert report_of(again)["recordedThisRun"] == len(reopened)
        done = cli(f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", "90", "--interval", "0.5",
                   "-o", "json", timeout=240)
        assert done.returncode == 0 and report_of(done)["safe"] is True, done.stderr
    assert live_batched_entries_in(d) == []


class Counting(LocalAdmin):
    """Counts the per-store calls a poll makes."""

    def __init__(self, engine):
        super().__init__(engine)
        self.calls: list[str] = []

    def pending_ack_internal_stats(self, topic, subscription, metadata=False):
        self.calls.append("internal")
        return super().pending_ack_internal_stats(topic, subscription, metadata)

    def pending_ack_stats(self, topic, subscription, low_water_marks=False):
        self.calls.append("stats")
        return super().pending_ack_stats(topic, subscription, low_water_marks)


@pytest.mark.slow
def test_a_store_proven_done_then_reopened_with_batching_on_is_caught(tmp_path):
    """A store proven done is then only asked whether it reopened (one small call per poll): that must still catch
    a reopen while batching was briefly on, and a reopen the ledgers alone could not show."""
    with engine_started(tmp_path) as (engine, admin):
        assert until_safe(engine, admin, tmp_path / "s.json").safe
        counting = Counting(engine)
        again = checked_status(engine, counting, tmp_path / "s.json")
        assert again.safe and counting.calls == ["stats"] * len(TOPICS)  # no ledgers re-read for proven stores
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "true")
        engine.reload_topic("persistent://public/default/t")
        traffic(engine, 30, "t", "s")
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "false")
        assert live_batched_entries(engine)
        for _ in range(3):
            report = checked_status(engine, admin, tmp_path / "s.json")
            assert not report.safe
            assert [l.name for l in report.groups()[Waiting.REOPENED]] == [
                "persistent://public/default/t-s__transaction_pending_ack"]
            load(engine)
        again = start(admin, tmp_path / "s.json")  # t batched and was counted: every log is re-recorded
        assert again["countedFlushes"] and again["rerecorded"] == len(again["coordinators"]) + len(
            again["pendingAckStores"])
        assert until_safe(engine, admin, tmp_path / "s.json").safe


def test_a_proven_store_still_recovering_is_not_taken_for_unchanged(tmp_path):
    """recoverStartTime 0 ("not recovered yet") from a store proven done earlier is a reopen under way, never
    "unchanged", even while its newest ledger is still the one confirmed."""
    with engine_started(tmp_path) as (engine, admin):
        assert until_safe(engine, admin, tmp_path / "s.json").safe

        class Recovering(LocalAdmin):
            def pending_ack_stats(self, topic, subscription, low_water_marks=False):
                stats = dict(super().pending_ack_stats(topic, subscription, low_water_marks))
                if topic == "persistent://public/default/u":
                    stats["recoverStartTime"] = 0
                return stats

        report = checked_status(engine, Recovering(engine), tmp_path / "s.json")
        assert not report.safe
        assert [l.name for l in report.groups()[Waiting.REOPENED]] == [
            "persistent://public/default/u-s__transaction_pending_ack"]


def test_a_rerecord_takes_the_other_stores_of_each_topic_it_reloads(tmp_path):
    """Reloading a store's topic reopens every store of that topic. A re-record that recorded only the one asked for
    left its siblings "reopened since recording", unprovable wherever the proof of a reopen needs counters (a broker
    without a process start time): `wait --rerecord` then re-recorded them, which reopened the first, without end."""
    from txnadmin.procedures.downgrade import rerecord
    from txnadmin.procedures.downgrade.checklist import load_state
    from txnadmin.procedures.downgrade.reopen import Session
    from txnadmin.procedures.downgrade.report import LogStatus

    with open_engine(tmp_path / "e", **BATCHED) as engine:
        admin = LocalAdmin(engine)
        load(engine)
        traffic(engine, 10, "t", "s2")
        state = tmp_path / "s.json"
        start(admin, state)
        sibling = f"{T_STORE.removesuffix('-s__transaction_pending_ack')}-s2__transaction_pending_ack"
        assert sibling in load_state(state)["pendingAckStores"]
        session = Session(admin, "", load_state(state)["flushBaselines"])
        assert rerecord(admin, state, [LogStatus("pending-ack", T_STORE, None, None, False, "")], session) == 2
        report = status(admin, state)
        assert [l.name for l in report.groups().get(Waiting.REOPENED, [])] == []  # neither is left unrecorded
