"""What `downgrade start` records: for every log, the last ledger that may hold a batched entry (LastBatched),
in a checklist that a re-run resumes. A rollover while `start` reloads, batching switched on and off during its
reloads, a run without a reload, and a re-record after a broker restart must each leave LastBatched covering every
ledger a batched entry may be in. In this process and through the CLI (`engine run` as `local:PATH`, or behind a
front door, tests/http_front.py); every "safe" is checked against the entry-log files."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time

import pytest
from typer.testing import CliRunner

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.cli.main import app
from txnadmin.procedures.downgrade import DowngradeError, Waiting, start, status

from downgrade_helpers import (
    BATCHED, TXNADMIN, checked_status, cli, engine_traffic, fresh_engine, load, local, report_of, running, server_of,
    traffic, until_safe,
)
from engine_helpers import live_batched_entries, live_batched_entries_in, open_engine, wait_served
from http_front import front

runner = CliRunner()


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


def _assert_covered(admin: HttpAdmin, tc: int, last_batched: int, just_before_reload: int) -> None:
    """Every ledger that existed just before the reload and is still live must be covered by LastBatched. The ledger
    the log rolled to may be gone instead: when the reload came before its first entry, the reopen dropped it as an
    empty last ledger (as Pulsar's managed-ledger recovery does), and a deleted ledger needs no cover."""
    stats = admin.coordinator_internal_stats(tc)["transactionLogStats"]["managedLedgerInternalStats"]
    live = [int(ledger["ledgerId"]) for ledger in stats["ledgers"]]
    uncovered = [ledger for ledger in live if last_batched < ledger <= just_before_reload]
    assert not uncovered, (tc, last_batched, just_before_reload, live)


@pytest.mark.slow
def test_a_rollover_between_recording_and_a_slow_reload_moves_last_batched_up(tmp_path):
    """Under traffic, each coordinator's unload is held at the broker's door until its log (still batching, not
    reopened) has rolled over: LastBatched must cover the ledgers that existed just before the reload."""
    d = fresh_engine(tmp_path)
    engine_traffic(d)
    state = tmp_path / "s.json"
    with running(d):
        url, token = server_of(d)
        admin = HttpAdmin(url, token=token)
        seen: dict[int, tuple[int, int]] = {}

        def newest(tc: int) -> int:
            stats = admin.coordinator_internal_stats(tc)
            return max(int(l["ledgerId"]) for l in stats["transactionLogStats"]["managedLedgerInternalStats"]["ledgers"])

        def slow_unload(method: str, path: str) -> None:
            if method != "PUT" or not path.endswith("/unload"):
                return
            tc = re.search(r"transaction_coordinator_assign-partition-(\d+)/unload", path)
            if not tc:
                return
            first = now = newest(int(tc.group(1)))
            deadline = time.monotonic() + 20  # within the CLI's request timeout; traffic rolls a log in well under
            while now == first and time.monotonic() < deadline:
                time.sleep(0.2)
                now = newest(int(tc.group(1)))
            seen[int(tc.group(1))] = (first, now)

        with front(url, token) as door:
            door.before_forward.append(slow_unload)
            started = cli(door.url, "downgrade", "start", "--yes", "--state", str(state), "-o", "json")
            assert started.returncode == 0, started.stderr
            checklist = json.loads(state.read_text())
            assert set(seen) == {0, 1}
            assert all(after > first for first, after in seen.values()), seen  # the logs did roll meanwhile
            for tc, (_, just_before_reload) in seen.items():
                _assert_covered(admin, tc, checklist["coordinators"][str(tc)]["lastBatchedLedgerId"], just_before_reload)
            done = cli(door.url, "downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5",
                       "-o", "json", timeout=240)
            assert done.returncode == 0 and report_of(done)["safe"] is True, done.stderr
    assert live_batched_entries_in(d) == []


# The same race with a plain `-u local:PATH` target: no front door, the CLI reaches the running `engine run`
# through its server.json. The broker itself is slow this time: the `engine run` process is started with its unload
# held (inside that process) until the log, still batching, has rolled over to a new ledger.
_SLOW_UNLOADS = """
import json, re, sys, time
from txnadmin.admin.local import LocalAdmin

_unload = LocalAdmin.unload_topic


def _newest(admin, topic):
    tc = re.search(r"transaction_coordinator_assign-partition-(\\d+)$", topic)
    if tc:
        stats = admin.coordinator_internal_stats(int(tc.group(1)))["transactionLogStats"]
        return "tc-" + tc.group(1), max(int(l["ledgerId"]) for l in stats["managedLedgerInternalStats"]["ledgers"])
    return None, None


def _slow_unload(self, topic):
    name, first = _newest(self, topic)
    if name is not None:
        now, deadline = first, time.monotonic() + 20
        while now == first and time.monotonic() < deadline:
            time.sleep(0.1)
            now = _newest(self, topic)[1]
        with open({log!r}, "a") as out:
            out.write(json.dumps([name, first, now]) + "\\n")
    return _unload(self, topic)


LocalAdmin.unload_topic = _slow_unload
"""


@pytest.mark.slow
def test_a_rollover_between_recording_and_a_slow_reload_with_a_plain_local_target(tmp_path):
    import subprocess
    import sys

    d = fresh_engine(tmp_path)
    engine_traffic(d)
    hook, held = tmp_path / "slow_unloads.py", tmp_path / "held.jsonl"
    hook.write_text(_SLOW_UNLOADS.format(log=str(held)))
    run = subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
                            "import slow_unloads; from txnadmin.cli.main import main; main()",
                            "engine", "run", str(d), "--duration", "0", "--rate", "150", "--concurrency", "4",
                            "--abort-ratio", "0", "-o", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def local(*args, timeout=240):
        return subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "-u", f"local:{d}", *args],
                              capture_output=True, text=True, timeout=timeout)

    state = tmp_path / "s.json"
    try:
        wait_served(d)
        time.sleep(1.0)
        started = local("downgrade", "start", "--yes", "--state", str(state), "-o", "json")
        assert started.returncode == 0, started.stderr
        assert report_of(started)["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        seen = {name: (first, now) for name, first, now in map(json.loads, held.read_text().splitlines())}
        assert set(seen) == {"tc-0", "tc-1"}
        assert all(now > first for first, now in seen.values()), seen  # each log did roll while its unload waited
        checklist = json.loads(state.read_text())
        url, token = server_of(d)
        admin = HttpAdmin(url, token=token)
        for name, (_, just_before_reload) in seen.items():
            _assert_covered(admin, int(name[3:]), checklist["coordinators"][name[3:]]["lastBatchedLedgerId"],
                            just_before_reload)
        done = local("downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5", "-o",
                     "json")
        assert done.returncode == 0 and report_of(done)["safe"] is True, done.stderr
    finally:
        run.terminate()
        run.wait(timeout=60)
    assert live_batched_entries_in(d) == []


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


REOPENED = "reopened since recording"


def _never_rolling_engine(tmp_path):
    """Batching on, and ledgers that roll only after a million entries or 240 minutes (the default): a wait that
    needs another roll cannot end within a test."""
    d = tmp_path / "e"
    args = ["engine", "init", str(d), "-c", "2"]
    for s in ("managedLedgerMaxEntriesPerLedger=1000000", "managedLedgerMinLedgerRolloverTimeMinutes=0",
              "transactionPendingAckLogIndexMinLag=5", "transactionLogBatchedWriteEnabled=true",
              "transactionPendingAckBatchedWriteEnabled=true"):
        args += ["--set", s]
    assert runner.invoke(app, args).exit_code == 0
    return d


def _broker(d) -> subprocess.Popen:
    """The engine as a live broker under steady traffic; returns once its admin API is up."""
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "150",
                                        "--concurrency", "4", "--abort-ratio", "0", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        if (d / "server.json").exists() and local(d, "transactions", "coordinators-list").returncode == 0:
            break
        assert proc.poll() is None, "engine run exited"
        time.sleep(0.05)
    time.sleep(1.0)  # traffic reaches every topic and subscription
    return proc


@contextlib.contextmanager
def _stopped_at_exit(procs: list):
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)


def _kill9(d, proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (d / "server.json").unlink(missing_ok=True)  # what a killed server leaves behind (its pid is gone anyway)


def _recorded(state) -> dict:
    """Each recorded log's checklist entry, by log key (coordinator id or store name)."""
    data = json.loads(state.read_text())
    return {**data["coordinators"], **data["pendingAckStores"]}


@pytest.mark.slow
def test_no_reload_rerecord_after_a_restart_waits_only_for_the_ledgers_before_it(tmp_path):
    d = _never_rolling_engine(tmp_path)
    state = tmp_path / "s.json"
    procs: list = []
    with _stopped_at_exit(procs):
        procs.append(_broker(d))
        first = local(d, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert first.returncode == 0, first.stderr
        before_restart = _recorded(state)
        # Not reopened yet: every log may still batch into its newest ledger, so that ledger is LastBatched.
        for key, rec in before_restart.items():
            assert rec["batchingOff"] is False and rec["lastBatchedLedgerId"] == rec["confirmedLedger"], (key, rec)
        time.sleep(1.0)  # the stores still batch under traffic with the flags off: they opened with them on
        _kill9(d, procs.pop())
        procs.append(_broker(d))  # the broker restart: every store reopens, on a new ledger, with the flags off
        polled = local(d, "downgrade", "status", "--state", str(state), "-o", "json")
        assert polled.returncode == 1 and report_of(polled)["waitingByReason"].get(REOPENED), polled.stdout
        again = local(d, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert again.returncode == 0, again.stderr
        after_restart = _recorded(state)
        assert all(rec["batchingOff"] is True for rec in after_restart.values()), after_restart
        done = local(d, "downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5",
                     "-o", "json")
        report = report_of(done)
        assert done.returncode == 0 and report["safe"] is True, (done.stderr, report["waitingByReason"])
        for comp in report["components"]:
            key = str(comp["coordinatorId"]) if comp["component"] == "coordinator" else comp["name"]
            # LastBatched is the ledger the log wrote before the restart, never the one its reopen created …
            assert comp["lastBatchedLedgerId"] == before_restart[key]["lastBatchedLedgerId"], comp
            # … so it is safe without another roll: the oldest live ledger is the one the reopen created.
            assert comp["oldestLedgerId"] == after_restart[key]["confirmedLedger"], comp
    assert live_batched_entries_in(d) == []
