"""Batched-writer flush counters, read on every broker's /metrics: a flush counted since recording keeps the
verdict from "safe", on a broker that is not the one answering too, and only a re-record of every log ends it (the
counters cannot say which store wrote)."""

from __future__ import annotations

import time

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.procedures.downgrade import start, status

from downgrade_helpers import (
    TOKEN, checked_status, cli, engine_started, fresh_engine, load, loaded_engine, report_of, running, serve_process,
    server_of, traffic, until_safe, waiting_for,
)
from http_front import brokers_are, front


def test_growing_batched_writer_flushes_on_metrics_mean_not_safe(tmp_path):
    with engine_started(tmp_path) as (engine, admin):
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


@pytest.mark.slow
def test_flush_counters_growing_on_another_broker_are_caught(tmp_path):
    """Two brokers behind one admin URL: A (`txnadmin serve`) answers, B (`engine run`) only shows up in the
    broker list. B's flags read off, but its stores opened while batching was on and still batch: only B's own
    /metrics shows it, and status must read it."""
    (tmp_path / "a").mkdir()
    a = loaded_engine(tmp_path / "a")
    b = fresh_engine(tmp_path / "b")
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path / "a", a) as (url_a, _), running(b):
        url_b, token_b = server_of(b)
        admin_b = HttpAdmin(url_b, token=token_b)
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            admin_b.update_dynamic_config(flag, "false")  # read at the next open only: B's stores keep batching
        with front(url_a, TOKEN) as door_a, front(url_b, token_b) as door_b:
            door_a.intercepts.append(brokers_are(door_a, door_a.netloc, door_b.netloc))
            started = cli(door_a.url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
            assert started.returncode == 0, started.stderr
            time.sleep(1.5)  # B's traffic goes on
            polled = cli(door_a.url, "downgrade", "status", "--state", state, "-o", "json")
            report = report_of(polled)
            assert polled.returncode == 1 and report["safe"] is False
            assert sorted(report["brokersChecked"]) == sorted([door_a.netloc, door_b.netloc])
            assert waiting_for(report, "batched writer still flushing") == {door_b.netloc}
            assert any(p.startswith("/metrics") for _, p in door_b.seen)


@pytest.mark.slow
def test_a_store_created_while_batching_was_briefly_on_is_not_ignored(tmp_path):
    with engine_started(tmp_path) as (engine, admin):
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
