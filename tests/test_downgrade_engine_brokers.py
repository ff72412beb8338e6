"""The downgrade's multi-broker rules on the engine's own brokers (`engine init --brokers N`, served by `engine run`
under a workload), through the CLI as an operator runs it, each verdict checked against the bytes afterwards
(`live_batched_entries_in`: the entry logs read byte by byte, no txnadmin reader involved):

- flags reaching the brokers at different moments (each broker's own watch delay);
- a broker leaving the active list and coming back as a new process in the middle of a wait;
- a store moving between brokers that see the flags differently (batching switched back on, seen by one broker);
- a broker whose /metrics has no ``process_start_time_seconds`` (``engineBrokersWithoutProcessStart``): its counters
  never prove a reopen harmless, nor a verdict once one was given, and its restart shows as its counters going down.

What no broker does on cue (a scripted active list, a watch that stalls, a frozen /metrics copy) stays with the
stand-ins of tests/test_downgrade_watch.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from engine_brokers_helpers import SMALL, TXNADMIN, batched_written, brokers, cli, init, run_engine, stop_engine, until
from engine_helpers import live_batched_entries_in

WAIT = ["--rerecord", "--yes", "--timeout", "180", "--interval", "1"]


def _flushes(d) -> dict[str, float]:
    """Each broker's batched-writer flush count, read from its own /metrics (not through txnadmin's procedure)."""
    from txnadmin.metrics.exposition import DOWNGRADE_METRICS, batched_flushes_by_label, parse_exposition

    out = {}
    for broker in brokers(d):
        samples = parse_exposition(_exposition(d, broker), DOWNGRADE_METRICS)
        out[broker["id"]] = sum(batched_flushes_by_label(samples).values())
    return out


def _exposition(d, broker: dict) -> str:
    """A broker's /metrics, as its scraper reads it."""
    import httpx

    token = json.loads((d / "server.json").read_text())["token"]
    return httpx.get(broker["url"] + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text


def _flushes_counted(home, d, state) -> list[dict]:
    status = cli(home, "-u", f"local:{d}", "downgrade", "status", "--state", str(state), "-o", "json")
    return [log for log in json.loads(status.stdout)["components"] if log["component"] == "broker"]


def test_start_confirms_the_flags_off_on_a_broker_whose_watch_is_late_before_it_reloads_anything(tmp_path):
    """Broker 2 sees every dynamic-config change 2.5 s after broker 1. `start` reloads nothing until both show the
    flags off, so no store reopens batching on broker 2: no flush is counted after it, and the wait ends safe with
    no batched entry left in a live ledger."""
    home, d, state = tmp_path / "home", tmp_path / "e", tmp_path / "dg.json"
    init(home, d, "--brokers", "2", *SMALL, "--set", "engineBrokerWatchDelaysMillis=0,2500")
    run = run_engine(home, d)
    try:
        until(lambda: batched_written(d), "batched entries", 30)
        started = cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes")
        assert started.returncode == 0, started.stdout + started.stderr
        assert "batching confirmed off on 2 broker(s)" in started.stdout
        assert _flushes_counted(home, d, state) == []  # nothing reopened batching behind the late watch
        waited = cli(home, "-u", f"local:{d}", "downgrade", "wait", "--state", str(state), *WAIT)
        assert waited.returncode == 0, waited.stdout + waited.stderr
    finally:
        stop_engine(run)
    assert live_batched_entries_in(d) == []


def test_a_broker_leaving_and_coming_back_during_the_wait_ends_safe_with_the_bytes_agreeing(tmp_path):
    """One of three brokers stops (it leaves the active list; its bundles fail over) and starts again (a new
    process, counters from zero) while `wait --rerecord` runs: the wait rides it out to safe, and the bytes agree."""
    home, d, state = tmp_path / "home", tmp_path / "e", tmp_path / "dg.json"
    init(home, d, "--brokers", "3", *SMALL)
    run = run_engine(home, d)
    try:
        until(lambda: batched_written(d), "batched entries", 30)
        assert cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes").returncode == 0
        env = dict(os.environ, TXNADMIN_HOME=str(home))
        waiting = subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", str(state), *WAIT],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        until(lambda: json.loads(state.read_text()).get("polls", 0) >= 1, "the wait's first poll", 60)
        third = brokers(d)[2]
        assert cli(home, "engine", "broker", "stop", str(d), "--broker", third["id"]).returncode == 0
        until(lambda: third["id"] not in json.loads(cli(home, "-u", f"local:{d}", "transactions", "coordinators-list",
                                                        "-o", "json").stdout or "[]").__str__(),
              "its coordinators failed over", 30)
        assert cli(home, "engine", "broker", "start", str(d), "--broker", third["id"]).returncode == 0
        out, err = waiting.communicate(timeout=240)
        assert waiting.returncode == 0, out + err
        assert "Traceback" not in err
        back = next(b for b in brokers(d) if b["id"] == third["id"])
        assert back["running"] and back["processStartTime"] != third["processStartTime"]
    finally:
        stop_engine(run)
    assert live_batched_entries_in(d) == []


def test_a_store_moving_onto_a_broker_that_saw_batching_on_keeps_the_flush_until_every_log_is_re_recorded(tmp_path):
    """Batching is switched back on after `start` and off again: broker 1 sees it at once, broker 2's watch (6 s
    late) never does. Bundles shed every 2 s carry stores and coordinators onto broker 1, which reopen batching
    and flush. With the flags off everywhere again, the flush stays a fact: `wait` stops (exit 1) instead of saying
    safe, and only `wait --rerecord` (every log re-recorded) converges to safe, with the bytes agreeing."""
    home, d, state = tmp_path / "home", tmp_path / "e", tmp_path / "dg.json"
    init(home, d, "--brokers", "2", *SMALL, "--set", "engineBrokerWatchDelaysMillis=0,6000")
    run = run_engine(home, d, "--fault", "shed=2")
    try:
        until(lambda: batched_written(d), "batched entries", 30)
        assert cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes").returncode == 0
        first = brokers(d)[0]["id"]
        both = ["transactionLogBatchedWriteEnabled", "transactionPendingAckBatchedWriteEnabled"]
        assert cli(home, "engine", "set", str(d), *(f"{k}=true" for k in both)).returncode == 0
        baseline = _flushes(d)
        until(lambda: _flushes(d)[first] > baseline[first], "a batched flush on broker 1", 30)
        assert cli(home, "engine", "set", str(d), *(f"{k}=false" for k in both)).returncode == 0
        assert _flushes(d)[brokers(d)[1]["id"]] == baseline[brokers(d)[1]["id"]]  # broker 2 never applied the flip
        assert [c["name"] for c in _flushes_counted(home, d, state)] == [first]
        stopped = cli(home, "-u", f"local:{d}", "downgrade", "wait", "--state", str(state), "--timeout", "60",
                      "--interval", "1")
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert "batched flushes were counted" in stopped.stderr
        waited = cli(home, "-u", f"local:{d}", "downgrade", "wait", "--state", str(state), *WAIT)
        assert waited.returncode == 0, waited.stdout + waited.stderr
    finally:
        stop_engine(run)
    assert live_batched_entries_in(d) == []


def _admin(d):
    from txnadmin.admin.http import HttpAdmin

    info = json.loads((d / "server.json").read_text())
    return HttpAdmin(info["url"], token=info["token"])


def _wait_json(home, d, state) -> subprocess.Popen:
    """`downgrade wait -o json` in the background, without --rerecord: a reopen it cannot prove stops it."""
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    return subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", str(state), "--timeout",
                                        "150", "--interval", "1", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _polls(state: Path) -> int:
    return int(json.loads(state.read_text()).get("polls", 0))


def _unproven(waiting: subprocess.Popen) -> list[str]:
    """The wait stopped for a re-record (exit 1, not safe): the reasons of the reopens it could not prove."""
    out, err = waiting.communicate(timeout=200)  # it stops at the reopen; the bounds only matter on a loaded machine
    assert waiting.returncode == 1, out + err
    assert "Traceback" not in err and "cannot be proven without a re-record" in err, err
    report = json.loads(out)
    assert report["safe"] is False
    return [c["reason"] for c in report["components"] if c["waitingFor"] == "reopened since recording"]


def _coordinators_on(home, d, broker: dict) -> list[int]:
    listed = cli(home, "-u", f"local:{d}", "transactions", "coordinators-list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return [c["id"] for c in json.loads(listed.stdout) if c["brokerServiceUrl"] == f"pulsar://{broker['id']}"]


def _frozen(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_broker_without_a_process_start_time_never_proves_and_its_restart_shows_in_its_counters(tmp_path):
    """Broker 2 of 2 exports no process_start_time_seconds. A coordinator unloaded while `wait` watches is not
    accepted: that broker's counters cannot rule out a restart that zeroed them. Its restart between two rounds of
    the watch is never accepted either (it shows as its counters going down when it falls inside the bracket). Re-recorded by `start`, the logs end safe by their ledgers (the
    bytes agree); a verdict after that one needs every broker's counters, and says "not yet" naming that broker."""
    from txnadmin.admin.protocol import TxnId

    home, d, state = tmp_path / "home", tmp_path / "e", tmp_path / "dg.json"
    init(home, d, "--brokers", "2", *SMALL, "--set", "engineBrokersWithoutProcessStart=1",
         "--set", "engineBrokerFailoverDelayMillis=200")
    # transactions left open keep some logs waiting, so each wait is still watching when the reopen comes
    run = run_engine(home, d, "--fault", "stuck-open", "--txn-timeout-ms", "600000")
    try:
        seen, blind = brokers(d)
        assert "process_start_time_seconds" in _exposition(d, seen)
        assert "process_start_time_seconds" not in _exposition(d, blind)
        # its counters must have something to lose at a restart
        until(lambda: _flushes(d)[blind["id"]] > 0, "a batched flush on the broker without a start time", 30)
        assert cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes").returncode == 0

        waiting = _wait_json(home, d, state)
        until(lambda: _polls(state) >= 1, "the wait's first poll", 60)
        with _admin(d) as admin:  # `pulsar-admin topics unload`: a reopen `start` did not ask for
            admin.unload_topic("persistent://pulsar/system/transaction_coordinator_assign-partition-0")
        reasons = _unproven(waiting)
        assert any(f"broker {blind['id']} exports no process_start_time_seconds" in r for r in reasons), reasons

        # `start` again re-records every log. Then the broker restarts, and its coordinators fail over, while the
        # wait is frozen: no round of its watch sees the broker leave the active list, so only its counters, back
        # to zero, can tell the restart inside the bracket of the reopens.
        assert cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes").returncode == 0
        assert _coordinators_on(home, d, blind)
        polls = _polls(state)
        waiting = _wait_json(home, d, state)
        until(lambda: _polls(state) > polls, "the second wait's first poll", 60)
        waiting.send_signal(signal.SIGSTOP)
        try:
            until(lambda: _frozen(waiting.pid), "the wait frozen", 10)
            restarted = cli(home, "engine", "broker", "restart", str(d), "--broker", blind["id"])
            assert restarted.returncode == 0, restarted.stderr
            until(lambda: not _coordinators_on(home, d, blind), "its coordinators failed over", 30)
        finally:
            waiting.send_signal(signal.SIGCONT)
        reasons = _unproven(waiting)
        # Named with what its counters showed: usually the restart ("went down"). When the last poll that saw the
        # log unchanged came after the restart, the restart is outside the judged bracket and the reason is only
        # that the broker exports no start time: never proven either way (the restart itself is pinned down by
        # tests/test_downgrade_watch.py's stand-in, where the timing is scripted).
        assert any(f"broker {blind['id']}" in r and "process_start_time_seconds" in r for r in reasons), reasons
        assert all("went down" in r for r in reasons if f"broker {blind['id']} restarted" in r), reasons

        # The operator aborts the open transactions; once their topic's subscriptions acknowledge again (their
        # pending-ack stores appear), the wait records them and ends safe by the ledgers alone.
        with _admin(d) as admin:
            for txn, meta in admin.slow_transactions(0).items():
                if meta.get("owner") == "fault:stuck-open":
                    admin.abort_transaction(TxnId.parse(txn))
            until(lambda: sum(t.endswith("__transaction_pending_ack") for t in admin.list_topics("public/default"))
                  == 4, "every subscription's pending-ack store", 30)
        # `wait --rerecord`, as the docs tell a script to run it: each reopen it cannot prove (that broker's counters
        # prove nothing) it reloads and re-records, with every other store of the topic it reloads, and ends safe
        waited = cli(home, "-u", f"local:{d}", "downgrade", "wait", "--state", str(state), *WAIT)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        status = cli(home, "-u", f"local:{d}", "downgrade", "status", "--state", str(state), "-o", "json")
        assert status.returncode == 1, status.stdout + status.stderr
        [counters] = [c for c in json.loads(status.stdout)["components"] if not c["done"]]
        assert counters["waitingFor"] == "flush counters not confirmed"
        assert f"broker {blind['id']} exports no process_start_time_seconds" in counters["reason"]
    finally:
        stop_engine(run)
    assert live_batched_entries_in(d) == []
