"""Trying to make `downgrade` say "safe" while a live ledger still holds batched entries (issue #14).

Each scenario is one way the tool lied before; every "safe" seen here is checked against the engine's entry-log
files read byte by byte (engine_helpers.live_batched_entries), independently of the tool.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import AdminError, NotFoundError
from txnadmin.procedures.downgrade import DowngradeError, Waiting, start, status, wait

from engine_helpers import live_batched_entries, open_engine
from test_downgrade import BATCHED, traffic

TOPICS = [("t", "s"), ("u", "s")]


def load(engine, n=20):
    for topic, sub in TOPICS:
        traffic(engine, n, topic, sub)
    for _ in range(3):
        engine.maintenance_tick()


@contextlib.contextmanager
def _started(tmp_path):
    """A batching engine under some traffic, with `downgrade start` recorded in tmp_path/s.json."""
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        admin = LocalAdmin(engine)
        load(engine)
        start(admin, tmp_path / "s.json")
        yield engine, admin


def checked_status(engine, admin, path):
    """status(), with every "safe" proven by the independent entry-log check."""
    report = status(admin, path)
    if report.safe:
        assert live_batched_entries(engine) == [], "the tool said safe while batched entries were live"
    return report


def until_safe(engine, admin, path, rounds=12):
    for _ in range(rounds):
        report = checked_status(engine, admin, path)
        if report.safe:
            return report
        load(engine)
    return report


@pytest.mark.slow
def test_reenabled_with_a_reload_between_two_polls_is_caught_and_rerecorded(tmp_path):
    with _started(tmp_path) as (engine, admin):
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
def test_no_reload_never_takes_a_rollover_for_the_end_of_batching(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        admin = LocalAdmin(engine)
        load(engine)
        # The flags go off, but nothing reopens: the stores keep batching with the value they opened with.
        start(admin, tmp_path / "s.json", reload=False)
        for _ in range(5):
            load(engine, 30)
            report = checked_status(engine, admin, tmp_path / "s.json")
            assert not report.safe
            # Every log waits for its reopen; the stores that still batch also show on /metrics.
            assert Waiting.NOT_REOPENED in report.groups()
            assert set(report.groups()) <= {Waiting.NOT_REOPENED, "batched writer still flushing"}
        assert any("reopens" in l.reason for l in report.waiting)


def test_a_rollover_between_recording_and_reload_moves_last_batched_up(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        admin = LocalAdmin(engine)
        load(engine)

        class SlowUnloads(LocalAdmin):
            def unload_topic(self, topic):
                load(engine, 12)  # traffic rolls the logs (still batching) before the unload lands
                super().unload_topic(topic)

        slow = SlowUnloads(engine)
        start(slow, tmp_path / "s.json", concurrency=1)
        assert until_safe(engine, admin, tmp_path / "s.json").safe


def test_a_store_reopened_by_someone_else_is_never_safe_until_rerecorded(tmp_path):
    with _started(tmp_path) as (engine, admin):
        engine.reload_topic("persistent://public/default/u")  # a broker restart, a bundle move …
        load(engine, 40)
        report = checked_status(engine, admin, tmp_path / "s.json")
        reopened = [l.name for l in report.groups().get(Waiting.REOPENED, [])]
        assert reopened == ["persistent://public/default/u-s__transaction_pending_ack"]
        assert not report.safe
        assert start(admin, tmp_path / "s.json")["rerecorded"] == 1
        assert until_safe(engine, admin, tmp_path / "s.json").safe


class Unloaded(LocalAdmin):
    """A store the listing still shows but whose broker has not loaded it: stats answer 404."""

    hidden = "persistent://public/default/u"
    deleted = False

    def pending_ack_internal_stats(self, topic, subscription, metadata=False):
        if topic == self.hidden:
            raise NotFoundError("Topic not found")
        return super().pending_ack_internal_stats(topic, subscription, metadata)

    def pending_ack_stats(self, topic, subscription, low_water_marks=False):
        if topic == self.hidden:
            raise NotFoundError("Topic not found")
        return super().pending_ack_stats(topic, subscription, low_water_marks)

    def list_topics(self, namespace, include_system=True):
        names = super().list_topics(namespace, include_system)
        return [n for n in names if not (self.deleted and n.startswith(self.hidden + "-"))]


@pytest.mark.slow
def test_an_unloaded_but_listed_store_is_not_deleted(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        admin = Unloaded(engine)
        for _ in range(6):
            load(engine, 30)
        report = checked_status(engine, admin, tmp_path / "s.json")
        assert not report.safe
        assert [l.name for l in report.groups()[Waiting.NOT_LOADED]] == [
            "persistent://public/default/u-s__transaction_pending_ack"]
        admin.deleted = True  # now it is gone from the listing too: deleted, done
        report = status(admin, tmp_path / "s.json")
        gone = [l for l in report.logs if l.name.startswith("persistent://public/default/u-")]
        assert gone[0].done and "deleted" in gone[0].reason


class ListingOmits(LocalAdmin):
    """A listing that leaves out u's store while the store is there and answers (a stale or partial listing)."""

    def list_topics(self, namespace, include_system=True):
        return [n for n in super().list_topics(namespace, include_system)
                if not n.startswith("persistent://public/default/u-")]


def test_a_store_missing_from_the_listing_but_still_answering_is_not_deleted(tmp_path):
    """Gone from the listing is confirmed by the store's own internal stats (404) before it counts as deleted: one
    that still answers is judged from its ledgers, and its batched ledgers keep it waiting."""
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        report = status(ListingOmits(engine), tmp_path / "s.json")
        u = [l for l in report.logs if l.name.startswith("persistent://public/default/u-")]
        assert u and not u[0].done and "deleted" not in u[0].reason, u
        assert not report.safe


def test_a_checklist_from_another_target_is_refused(tmp_path):
    with open_engine(tmp_path / "a", **BATCHED) as a:
        load(a)
        start(LocalAdmin(a), tmp_path / "s.json", "local:" + str(tmp_path / "a"))
    with open_engine(tmp_path / "b", **BATCHED) as b:
        load(b)
        admin = LocalAdmin(b)
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "false")
        for call in (lambda: start(admin, tmp_path / "s.json", "local:" + str(tmp_path / "a")),
                     lambda: status(admin, tmp_path / "s.json")):
            with pytest.raises(DowngradeError, match="recorded on another target.*--state.*reset") as err:
                call()
            assert err.value.exit_code == 3


class Flaky(LocalAdmin):
    """Fails the first ``failures`` runtime-config reads with ``error``, or hangs them."""

    def __init__(self, engine, error=None, failures=2, hang=False):
        import threading

        super().__init__(engine)
        self.error, self.failures, self.hang = error, failures, hang
        self.release = threading.Event()

    def runtime_config(self):
        if self.hang:
            self.release.wait(120)  # released by the test, so no thread outlives it
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        return super().runtime_config()


@pytest.mark.slow
def test_wait_rides_out_a_broker_restart_and_stops_at_once_on_401(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        for _ in range(8):
            load(engine, 30)
        retries = []
        flaky = Flaky(engine, AdminError("cannot connect (Connection refused)", 0), failures=2)
        report = wait(flaky, tmp_path / "s.json", 30, 0.1, on_retry=lambda e, p: retries.append(e))
        assert len(retries) == 2 and "Connection refused" in retries[0]
        assert report.safe and live_batched_entries(engine) == []
        denied = Flaky(engine, AdminError("not authorized", 401), failures=1)
        t = time.monotonic()
        with pytest.raises(DowngradeError) as err:
            wait(denied, tmp_path / "s.json", 30, 0.1)
        assert err.value.exit_code == 3 and time.monotonic() - t < 25


def test_wait_timeout_bounds_a_hung_target(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        hung = Flaky(engine, hang=True)
        t = time.monotonic()
        try:
            with pytest.raises(DowngradeError, match="no answer from the target within --timeout") as err:
                wait(hung, tmp_path / "s.json", 1, 0.1)
        finally:
            hung.release.set()
        assert err.value.exit_code == 3 and time.monotonic() - t < 30


def test_a_store_deleted_mid_wait_counts_as_done_and_an_idle_one_does_not(tmp_path):
    """Through a real `txnadmin serve`: the deleted store is done, the idle store unloaded by start keeps waiting."""
    import json as _json

    from typer.testing import CliRunner

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.cli.main import app

    from serve_helpers import serving

    d = tmp_path / "e"
    with open_engine(d, **BATCHED) as engine:
        load(engine)
    runner = CliRunner()
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home") as (url, token):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", state]).exit_code == 0
        HttpAdmin(url, token=token).delete_subscription("persistent://public/default/t", "s")
        result = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", state, "-o", "json"])
    report = _json.loads(result.stdout)
    by_name = {c["name"]: c for c in report["components"]}
    deleted = by_name["persistent://public/default/t-s__transaction_pending_ack"]
    assert deleted["done"] and "deleted" in deleted["reason"]
    idle = by_name["persistent://public/default/u-s__transaction_pending_ack"]
    assert not idle["done"] and result.exit_code == 1


@pytest.mark.slow
def test_a_store_created_while_batching_was_briefly_on_is_not_ignored(tmp_path):
    with _started(tmp_path) as (engine, admin):
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "true")
        traffic(engine, 30, "late", "s")  # a new subscription opens its store while batching is on
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "false")
        for _ in range(4):
            load(engine, 30)
            report = checked_status(engine, admin, tmp_path / "s.json")
            assert not report.safe
            assert [l.name for l in report.groups()["created since recording"]] == [
                "persistent://public/default/late-s__transaction_pending_ack"]
        # The late store batched, and the counters counted it: which store wrote is not known from them, so every
        # log is re-recorded (not only the late one), and that is what ends the counted flushes.
        again = start(admin, tmp_path / "s.json")
        assert again["countedFlushes"] and again["rerecorded"] == len(again["coordinators"]) + len(
            again["pendingAckStores"])
        for _ in range(12):
            traffic(engine, 20, "late", "s")
            load(engine)
            if checked_status(engine, admin, tmp_path / "s.json").safe:
                break
        assert checked_status(engine, admin, tmp_path / "s.json").safe


def test_growing_batched_writer_flushes_on_metrics_mean_not_safe(tmp_path):
    with _started(tmp_path) as (engine, admin):
        report = until_safe(engine, admin, tmp_path / "s.json")
        assert report.safe
        # A store the tool does not know of keeps batching (here: its writer switched back on behind our back).
        store = engine.stores[("persistent://public/default/t", "s")]
        from dataclasses import replace

        store.update_writer_config(replace(store.writer_config, enabled=True))
        traffic(engine, 20, "t", "s")
        report = status(admin, tmp_path / "s.json")
        assert not report.safe
        assert [l.kind for l in report.waiting] == ["batched writer still flushing"]


def test_a_deleted_topic_takes_its_stores_along_and_counts_as_done(tmp_path):
    with _started(tmp_path) as (engine, admin):
        admin.delete_topic("persistent://public/default/u")
        assert "persistent://public/default/u-s__transaction_pending_ack" not in admin.list_topics("public/default")
        with pytest.raises(NotFoundError):
            admin.pending_ack_internal_stats("persistent://public/default/u", "s")
        report = checked_status(engine, admin, tmp_path / "s.json")
        gone = [l for l in report.logs if l.name == "persistent://public/default/u-s__transaction_pending_ack"]
        assert gone[0].done and "deleted" in gone[0].reason


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
    with _started(tmp_path) as (engine, admin):
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


def test_a_proven_store_that_answers_404_is_deleted_only_when_gone_from_the_listing(tmp_path):
    with _started(tmp_path) as (engine, _admin):
        admin = Unloaded(engine)
        admin.hidden = "nothing"
        assert until_safe(engine, admin, tmp_path / "s.json").safe
        admin.hidden = "persistent://public/default/u"  # proven done earlier, now its broker has not loaded it
        report = checked_status(engine, admin, tmp_path / "s.json")
        assert not report.safe and [l.name for l in report.groups()[Waiting.NOT_LOADED]] == [
            "persistent://public/default/u-s__transaction_pending_ack"]
        admin.deleted = True
        gone = [l for l in status(admin, tmp_path / "s.json").logs if l.name.startswith(admin.hidden + "-")]
        assert gone[0].done and "deleted" in gone[0].reason


def test_batching_switched_on_and_off_again_while_start_reloads_is_caught(tmp_path):
    """Someone switches batching on while `start` is reloading topics one after another, and off again a few
    reloads later: both ends of `start` see it off, but the stores reloaded meanwhile opened batching. A fresh
    subscription's store (nothing before its reopen, so nothing to trim) wrote batched entries then and nothing
    since: neither its ledgers nor the flush counters would ever show it."""
    flag = "transactionPendingAckBatchedWriteEnabled"
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        engine.subscribe("fresh", "s")
        engine.store("fresh", "s")  # its pending-ack store, open and empty
        reloads: list[str] = []

        class Toggling(LocalAdmin):
            def unload_topic(self, topic):
                reloads.append(topic)
                if topic.endswith("/fresh"):
                    super().update_dynamic_config(flag, "true")
                    super().unload_topic(topic)
                    traffic(engine, 10, "fresh", "s")  # its subscription acknowledges, batched, while it is on
                    return
                if reloads and any(r.endswith("/fresh") for r in reloads[:-1]):
                    super().update_dynamic_config(flag, "false")  # off again at a later reload
                super().unload_topic(topic)

        with pytest.raises(DowngradeError) as err:
            start(Toggling(engine), tmp_path / "s.json", concurrency=1)
        assert err.value.exit_code == 1 and "switched back on" in str(err.value)
        assert live_batched_entries(engine)
        admin = LocalAdmin(engine)
        if admin.dynamic_config().get(flag) == "true":
            admin.update_dynamic_config(flag, "false")
        with pytest.raises(DowngradeError):
            status(admin, tmp_path / "s.json")  # nothing was recorded as proven: no verdict at all
        state = start(admin, tmp_path / "s.json")  # run again: records every log afresh, batching off
        assert state["rerecorded"] >= 1
        for _ in range(12):
            traffic(engine, 20, "fresh", "s")  # its batched ledger is trimmed only as its subscription moves on
            load(engine)
            if checked_status(engine, admin, tmp_path / "s.json").safe:
                break
        assert checked_status(engine, admin, tmp_path / "s.json").safe


def test_a_proven_store_still_recovering_is_not_taken_for_unchanged(tmp_path):
    """recoverStartTime 0 ("not recovered yet") from a store proven done earlier is a reopen under way, never
    "unchanged", even while its newest ledger is still the one confirmed."""
    with _started(tmp_path) as (engine, admin):
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
