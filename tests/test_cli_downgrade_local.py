"""Cases of issue #14 that were driven through the CLI only against `txnadmin serve` (an http:// target), now also
with a plain `-u local:PATH` target, as an operator of the embedded engine types it: re-enabled between polls, no
reload, a deleted store, a hung engine under `wait --timeout 10`, an engine restart during `wait`. With an engine running, `local:PATH` goes through its server.json; stopped, through the
read-only view. Every "safe" is checked against the entry-log files once the engine has stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from txnadmin.admin.http import HttpAdmin

from engine_helpers import live_batched_entries_in
from serve_helpers import serving
from test_cli_downgrade import _engine as _batching_engine, _load, _running
from test_cli_downgrade_serve import TC_ASSIGN, _engine as _loaded_engine

pytestmark = pytest.mark.slow  # every test drives engine processes through a whole downgrade wait: several seconds each

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def local(d, *args, timeout=240):
    """The CLI with nothing but `-u local:PATH`: no token, no URL (a running engine's own server.json is used)."""
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout)


def _json(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def _wait_in_background(d, state, timeout: str) -> subprocess.Popen:
    """`downgrade wait -o json` through `-u local:PATH`, left running while the test restarts the engine."""
    return subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", timeout,
                                        "--interval", "0.5", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _after_its_first_poll(waiter: subprocess.Popen) -> str:
    """Block until the background wait has shown its first poll (it runs against the server, not a stopped view,
    however slowly a loaded machine starts it); its first stderr line, for the caller to keep."""
    assert waiter.stderr is not None
    return waiter.stderr.readline()


def _someone_else(d) -> HttpAdmin:
    """Another operator on the same broker (the running engine's own admin API)."""
    info = json.loads((d / "server.json").read_text())
    return HttpAdmin(info["url"], token=info["token"])


def test_reenabled_between_polls_and_no_reload_through_a_plain_local_target(tmp_path):
    d = _batching_engine(tmp_path)
    _load(d)
    state, noreload = str(tmp_path / "s.json"), str(tmp_path / "n.json")
    with _running(d):
        started = local(d, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert _json(started)["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        other = _someone_else(d)
        # Between two polls: batching on, a coordinator reloads and batches under traffic, batching off again.
        other.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        other.unload_topic(TC_ASSIGN.format(0))
        other.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        polled = local(d, "downgrade", "status", "--state", state, "-o", "json")
        report = _json(polled)
        assert polled.returncode == 1 and report["safe"] is False
        assert report["waitingByReason"]["reopened since recording"] == 1
        assert local(d, "downgrade", "status", "--state", state).stdout.startswith(f"target: local:{d} (from "
                                                                                   "--admin-url)")
        # Without a reload nothing is proven: every log waits for its store to reopen, however long the traffic.
        assert local(d, "downgrade", "start", "--yes", "--no-reload", "--state", noreload).returncode == 0
        waiting = local(d, "downgrade", "status", "--state", noreload, "-o", "json")
        assert waiting.returncode == 1 and _json(waiting)["safe"] is False
        assert "store not reopened" in _json(waiting)["waitingByReason"]
        assert set(_json(waiting)["waitingByReason"]) <= {"store not reopened", "batched writer still flushing"}
        # start again: the coordinator that reopened batched under traffic, and the counters counted it, so every
        # log is re-recorded (which store wrote is unknown); then the wait can end.
        again = local(d, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert _json(again)["countedFlushes"]
        assert _json(again)["recordedThisRun"] == _json(again)["coordinators"] + _json(again)["pendingAckStores"]
        done = local(d, "downgrade", "wait", "--state", state, "--timeout", "90", "--interval", "0.5", "-o", "json")
        assert done.returncode == 0 and _json(done)["safe"] is True, done.stderr
        other.close()
    assert live_batched_entries_in(d) == []


def test_a_deleted_store_counts_as_done_through_a_plain_local_target_running_and_stopped(tmp_path):
    d = _loaded_engine(tmp_path)  # topics t and u, subscription s on each, no traffic: u's store never trims
    state = str(tmp_path / "s.json")
    u_store = "persistent://public/default/u-s__transaction_pending_ack"
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        before = {c["name"]: c for c in _json(local(d, "downgrade", "status", "--state", state, "-o",
                                                    "json"))["components"]}
        assert before[u_store]["done"] is False
        other = _someone_else(d)
        other.delete_subscription("persistent://public/default/u", "s")
        other.close()
        polled = {c["name"]: c for c in _json(local(d, "downgrade", "status", "--state", state, "-o",
                                                    "json"))["components"]}
        assert polled[u_store]["done"] is True and "deleted" in polled[u_store]["reason"]
    # Stopped: the read-only view says the same (gone from the listing), and nothing else changed its verdict.
    stopped = {c["name"]: c for c in _json(local(d, "downgrade", "status", "--state", state, "-o",
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


def test_a_hung_engine_during_wait_is_bounded_by_timeout_through_a_plain_local_target(tmp_path):
    import os
    import signal
    import time

    d = _loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        pid = json.loads((d / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGSTOP)  # the broker hangs: connections are accepted by the kernel, never answered
        try:
            t = time.monotonic()
            hung = local(d, "downgrade", "wait", "--state", state, "--timeout", "10", "--interval", "1", timeout=90)
            assert hung.returncode == 3 and "within --timeout 10" in hung.stderr, hung.stderr
            assert "Traceback" not in hung.stderr and time.monotonic() - t < 60  # generous: not a timing test
        finally:
            os.kill(pid, signal.SIGCONT)


def test_wait_rides_out_an_engine_restart_through_a_plain_local_target(tmp_path):
    """The engine's server stops and comes back at the same address (`serve --port --token-file`): `wait` keeps
    retrying, and the restart reopened every store, so the verdict says so instead of "safe"."""
    import time

    from txnadmin.server.run import free_port

    from test_cli_downgrade_serve import _serve

    d = _loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    port = free_port()
    with _serve(tmp_path, d, port):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        waiter = _wait_in_background(d, state, "40")
        first = _after_its_first_poll(waiter)
        time.sleep(2)
    time.sleep(2)
    with _serve(tmp_path, d, port):
        out, err = waiter.communicate(timeout=120)
        err = first + err
    assert "retrying" in err and "Traceback" not in err
    report = json.loads(out)
    assert waiter.returncode == 1 and report["safe"] is False
    assert report["waitingByReason"].get("reopened since recording")


def test_wait_follows_an_engine_that_restarts_on_another_port_with_another_token(tmp_path):
    """A restarted engine picks a new port and a new token: `wait` re-reads the engine's server.json when the old
    address refuses connections, carries on against the new one, and still judges the restart's reopen."""
    import time

    d = _loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home") as (first_url, first_token):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        waiter = _wait_in_background(d, state, "60")
        first = _after_its_first_poll(waiter)
        time.sleep(2)
    time.sleep(2)
    with serving(d, tmp_path / "home") as (second_url, second_token):
        assert (second_url, second_token) != (first_url, first_token)
        out, err = waiter.communicate(timeout=150)
        err = first + err
    assert "Traceback" not in err, err
    report = json.loads(out)
    # Without following the move the wait would end at --timeout with exit 3; it reaches a verdict instead.
    assert waiter.returncode == 1 and report["safe"] is False, err
    assert report["waitingByReason"].get("reopened since recording")
    assert second_token not in out + err and first_token not in out + err
