"""The cases of issue #14 that were only tested in-process, now driven through the CLI against real engine servers
(`txnadmin serve`, and `engine run` reached as `local:PATH`): a store reopened by someone else, a rollover between
recording and reload (behind a front door, and with a plain `-u local:PATH`), a store listed but not loaded, and
batched-writer flush counters on every broker.

Where a real cluster varies in ways one engine cannot (several brokers behind one admin URL, a slow unload, a
broker that has not loaded a topic), a loopback front door (tests/http_front.py) forwards to the real server and
changes only that. Every "safe" is checked against the entry-log files once the engine has stopped.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG

from engine_helpers import live_batched_entries_in, wait_served
from http_front import brokers_are, front
from test_cli_downgrade import _engine as _batching_engine, _load, _running
from test_cli_downgrade_serve import TOKEN, _engine as _loaded_engine, _serve, cli

pytestmark = pytest.mark.slow  # every test races engine processes against downgrade polls: several seconds each

U_STORE = "persistent://public/default/u-s__transaction_pending_ack"
REOPENED = "reopened since recording"


def _report(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def _waiting_for(report: dict, kind: str) -> set[str]:
    return {c["name"] for c in report["components"] if c.get("waitingFor") == kind}


def _server(d):
    info = json.loads((d / "server.json").read_text())
    return info["url"], info["token"]


# -- a store reopened by someone else ------------------------------------------------------------------------

def test_a_store_reopened_by_someone_else_through_serve(tmp_path):
    d = _loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _serve(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
        # Someone else unloads a topic (a bundle move, a broker restart): its store reopens, flags off or not.
        HttpAdmin(url, token=TOKEN).unload_topic("persistent://public/default/u")
        polled = cli(url, "downgrade", "status", "--state", state, "-o", "json")
        report = _report(polled)
        assert polled.returncode == 1 and report["safe"] is False
        assert _waiting_for(report, REOPENED) == {U_STORE}  # exactly that store, nothing else
        again = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert again.returncode == 0 and _report(again)["recordedThisRun"] == 1
        assert _waiting_for(_report(cli(url, "downgrade", "status", "--state", state, "-o", "json")), REOPENED) == set()


def test_a_store_reopened_by_someone_else_through_local_engine_run(tmp_path):
    d = _batching_engine(tmp_path)
    _load(d)
    state = str(tmp_path / "s.json")
    with _running(d):
        assert cli(f"local:{d}", "downgrade", "start", "--yes", "--state", state).returncode == 0
        url, token = _server(d)
        HttpAdmin(url, token=token).unload_topic("persistent://public/default/txn-topic-0")
        polled = cli(f"local:{d}", "downgrade", "status", "--state", state, "-o", "json")
        report = _report(polled)
        reopened = _waiting_for(report, REOPENED)
        assert polled.returncode == 1 and reopened
        assert all(name.startswith("persistent://public/default/txn-topic-0-") for name in reopened)
        again = cli(f"local:{d}", "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert _report(again)["recordedThisRun"] == len(reopened)
        done = cli(f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", "90", "--interval", "0.5",
                   "-o", "json", timeout=240)
        assert done.returncode == 0 and _report(done)["safe"] is True, done.stderr
    assert live_batched_entries_in(d) == []


# -- a rollover between recording and reload -----------------------------------------------------------------

def _assert_covered(admin: HttpAdmin, tc: int, last_batched: int, just_before_reload: int) -> None:
    """Every ledger that existed just before the reload and is still live must be covered by LastBatched. The ledger
    the log rolled to may be gone instead: when the reload came before its first entry, the reopen dropped it as an
    empty last ledger (as Pulsar's managed-ledger recovery does), and a deleted ledger needs no cover."""
    stats = admin.coordinator_internal_stats(tc)["transactionLogStats"]["managedLedgerInternalStats"]
    live = [int(ledger["ledgerId"]) for ledger in stats["ledgers"]]
    uncovered = [ledger for ledger in live if last_batched < ledger <= just_before_reload]
    assert not uncovered, (tc, last_batched, just_before_reload, live)


def test_a_rollover_between_recording_and_a_slow_reload_moves_last_batched_up(tmp_path):
    """Under traffic, each coordinator's unload is held at the broker's door until its log (still batching, not
    reopened) has rolled over: LastBatched must cover the ledgers that existed just before the reload."""
    d = _batching_engine(tmp_path)
    _load(d)
    state = tmp_path / "s.json"
    with _running(d):
        url, token = _server(d)
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
            assert done.returncode == 0 and _report(done)["safe"] is True, done.stderr
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


def test_a_rollover_between_recording_and_a_slow_reload_with_a_plain_local_target(tmp_path):
    import subprocess
    import sys

    d = _batching_engine(tmp_path)
    _load(d)
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
        assert _report(started)["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        seen = {name: (first, now) for name, first, now in map(json.loads, held.read_text().splitlines())}
        assert set(seen) == {"tc-0", "tc-1"}
        assert all(now > first for first, now in seen.values()), seen  # each log did roll while its unload waited
        checklist = json.loads(state.read_text())
        url, token = _server(d)
        admin = HttpAdmin(url, token=token)
        for name, (_, just_before_reload) in seen.items():
            _assert_covered(admin, int(name[3:]), checklist["coordinators"][name[3:]]["lastBatchedLedgerId"],
                            just_before_reload)
        done = local("downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5", "-o",
                     "json")
        assert done.returncode == 0 and _report(done)["safe"] is True, done.stderr
    finally:
        run.terminate()
        run.wait(timeout=60)
    assert live_batched_entries_in(d) == []


# -- a store listed but not loaded ---------------------------------------------------------------------------

def test_a_listed_but_unloaded_store_keeps_waiting_until_it_is_really_gone(tmp_path):
    d = _loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _serve(tmp_path, d) as (url, _), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", state).returncode == 0

        def not_loaded(method: str, path: str):
            if re.search(r"/pendingAck(Internal)?Stats/public/default/u/", path):
                return 404, json.dumps({"reason": "Topic not found"})
            return None

        door.intercepts.append(not_loaded)
        for _ in range(2):  # never turns into "deleted" while the listing still shows it
            polled = cli(door.url, "downgrade", "status", "--state", state, "-o", "json")
            report = _report(polled)
            assert polled.returncode == 1 and report["safe"] is False
            assert _waiting_for(report, "store not loaded") == {U_STORE}
        HttpAdmin(url, token=TOKEN).delete_subscription("persistent://public/default/u", "s")
        report = _report(cli(door.url, "downgrade", "status", "--state", state, "-o", "json"))
        gone = [c for c in report["components"] if c["name"] == U_STORE]
        assert gone[0]["done"] and "deleted" in gone[0]["reason"]


# -- /metrics on every broker --------------------------------------------------------------------------------

def test_flush_counters_growing_on_another_broker_are_caught(tmp_path):
    """Two brokers behind one admin URL: A (`txnadmin serve`) answers, B (`engine run`) only shows up in the
    broker list. B's flags read off, but its stores opened while batching was on and still batch: only B's own
    /metrics shows it, and status must read it."""
    (tmp_path / "a").mkdir()
    a = _loaded_engine(tmp_path / "a")
    b = _batching_engine(tmp_path / "b")
    state = str(tmp_path / "s.json")
    with _serve(tmp_path / "a", a) as (url_a, _), _running(b):
        url_b, token_b = _server(b)
        admin_b = HttpAdmin(url_b, token=token_b)
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            admin_b.update_dynamic_config(flag, "false")  # read at the next open only: B's stores keep batching
        with front(url_a, TOKEN) as door_a, front(url_b, token_b) as door_b:
            door_a.intercepts.append(brokers_are(door_a, door_a.netloc, door_b.netloc))
            started = cli(door_a.url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
            assert started.returncode == 0, started.stderr
            time.sleep(1.5)  # B's traffic goes on
            polled = cli(door_a.url, "downgrade", "status", "--state", state, "-o", "json")
            report = _report(polled)
            assert polled.returncode == 1 and report["safe"] is False
            assert sorted(report["brokersChecked"]) == sorted([door_a.netloc, door_b.netloc])
            assert _waiting_for(report, "batched writer still flushing") == {door_b.netloc}
            assert any(p.startswith("/metrics") for _, p in door_b.seen)
