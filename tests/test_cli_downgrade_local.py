"""Cases of issue #14 that were driven through the CLI only against `txnadmin serve` (an http:// target), now also
with a plain `-u local:PATH` target, as an operator of the embedded engine types it: re-enabled between polls, no
reload, a deleted store. With an engine running, `local:PATH` goes through its server.json; stopped, through the
read-only view. Every "safe" is checked against the entry-log files once the engine has stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys

from txnadmin.admin.http import HttpAdmin

from engine_helpers import live_batched_entries_in
from serve_helpers import serving
from test_cli_downgrade import _engine as _batching_engine, _load, _running
from test_cli_downgrade_serve import TC_ASSIGN, _engine as _loaded_engine

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def local(d, *args, timeout=240):
    """The CLI with nothing but `-u local:PATH`: no token, no URL (a running engine's own server.json is used)."""
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout)


def _json(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


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
        # start again re-records exactly the coordinator that reopened; then the wait can end.
        again = local(d, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert _json(again)["recordedThisRun"] == 1
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
    assert {n: c["done"] for n, c in stopped.items() if n != u_store} == \
        {n: c["done"] for n, c in polled.items() if n != u_store}
