"""Stores that are gone, or only look gone: a store counts as done because it was deleted only once it has left
the listing and its own stats answer 404; a store listed but not loaded (404 while listed), or missing from a listing
while it still answers, keeps waiting. In this process, and through the CLI against `txnadmin serve`, a front door
and a plain `-u local:PATH` (running and stopped)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import NotFoundError
from txnadmin.procedures.downgrade import Waiting, start, status

from downgrade_helpers import (
    BATCHED, TOKEN, U_STORE, Unloaded, checked_status, cli, engine_started, load, loaded_engine, local, report_of,
    serve_process, someone_else, until_safe, waiting_for,
)
from engine_helpers import open_engine
from http_front import front
from serve_helpers import serving

runner = CliRunner()


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


@pytest.mark.slow
def test_a_listed_but_unloaded_store_keeps_waiting_until_it_is_really_gone(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path, d) as (url, _), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", state).returncode == 0

        def not_loaded(method: str, path: str):
            if re.search(r"/pendingAck(Internal)?Stats/public/default/u/", path):
                return 404, json.dumps({"reason": "Topic not found"})
            return None

        door.intercepts.append(not_loaded)
        for _ in range(2):  # never turns into "deleted" while the listing still shows it
            polled = cli(door.url, "downgrade", "status", "--state", state, "-o", "json")
            report = report_of(polled)
            assert polled.returncode == 1 and report["safe"] is False
            assert waiting_for(report, "store not loaded") == {U_STORE}
        HttpAdmin(url, token=TOKEN).delete_subscription("persistent://public/default/u", "s")
        report = report_of(cli(door.url, "downgrade", "status", "--state", state, "-o", "json"))
        gone = [c for c in report["components"] if c["name"] == U_STORE]
        assert gone[0]["done"] and "deleted" in gone[0]["reason"]


def test_a_proven_store_that_answers_404_is_deleted_only_when_gone_from_the_listing(tmp_path):
    with engine_started(tmp_path) as (engine, _admin):
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


def test_a_store_deleted_mid_wait_counts_as_done_and_an_idle_one_does_not(tmp_path):
    """Through a real `txnadmin serve`: the deleted store is done, the idle store unloaded by start keeps waiting."""
    import json as _json

    from serve_helpers import serving
    from typer.testing import CliRunner

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.cli.main import app

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
def test_a_deleted_store_counts_as_done_through_a_plain_local_target_running_and_stopped(tmp_path):
    d = loaded_engine(tmp_path)  # topics t and u, subscription s on each, no traffic: u's store never trims
    state = str(tmp_path / "s.json")
    u_store = "persistent://public/default/u-s__transaction_pending_ack"
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        before = {c["name"]: c for c in report_of(local(d, "downgrade", "status", "--state", state, "-o",
                                                        "json"))["components"]}
        assert before[u_store]["done"] is False
        other = someone_else(d)
        other.delete_subscription("persistent://public/default/u", "s")
        other.close()
        polled = {c["name"]: c for c in report_of(local(d, "downgrade", "status", "--state", state, "-o",
                                                        "json"))["components"]}
        assert polled[u_store]["done"] is True and "deleted" in polled[u_store]["reason"]
    # Stopped: the read-only view says the same (gone from the listing), and nothing else changed its verdict.
    stopped = {c["name"]: c for c in report_of(local(d, "downgrade", "status", "--state", state, "-o",
                                                     "json"))["components"]}
    assert stopped[u_store]["done"] is True and "deleted" in stopped[u_store]["reason"]
    # Nothing else changed its verdict backwards, and no other log is dropped or invented by the stopped view. The
    # served engine's maintenance sweep may trim a log between the two polls (its old ledger wholly behind the
    # cursor), so a log may only become done, and then on the proof the stopped view read from its ledgers.
    assert set(stopped) == set(polled)
    for name, comp in stopped.items():
        if name == u_store:
            continue
        if polled[name]["done"]:
            assert comp["done"] is True, (name, comp)
        elif comp["done"]:
            assert comp["oldestLedgerId"] > comp["lastBatchedLedgerId"] == polled[name]["lastBatchedLedgerId"], \
                (name, comp)
            assert "is newer than LastBatched" in comp["reason"], (name, comp)


def test_a_deleted_topic_takes_its_stores_along_and_counts_as_done(tmp_path):
    with engine_started(tmp_path) as (engine, admin):
        admin.delete_topic("persistent://public/default/u")
        assert "persistent://public/default/u-s__transaction_pending_ack" not in admin.list_topics("public/default")
        with pytest.raises(NotFoundError):
            admin.pending_ack_internal_stats("persistent://public/default/u", "s")
        report = checked_status(engine, admin, tmp_path / "s.json")
        gone = [l for l in report.logs if l.name == "persistent://public/default/u-s__transaction_pending_ack"]
        assert gone[0].done and "deleted" in gone[0].reason
