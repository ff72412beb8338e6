"""Reading a STOPPED engine through `local:PATH` changes nothing, and its verdict stays honest (issue #14, item 9).

Before, every `local:` read opened the engine for writing: each store reopened (so `downgrade status` said
"reopened since recording" about an engine nobody had touched), ledgers were rolled and metadata written. Now a
stopped engine is read as a view: the directory's bytes are checked to be identical after every reading command,
and every "safe" is checked against the entry-log files read byte by byte (engine_helpers.live_batched_entries_in).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.config import update_dynamic

from downgrade_helpers import TXNADMIN, engine_traffic, fresh_engine, running
from engine_helpers import directory_fingerprint, live_batched_entries_in, wait_served

runner = CliRunner()
REOPENED = "reopened since recording"
T = "persistent://public/default/txn-topic-0"  # what `engine run` produces to and acks on (sub-0)


def _safe_and_stopped(tmp_path):
    """An engine that `downgrade start` + `wait` proved safe under traffic, then stopped."""
    d = fresh_engine(tmp_path)
    engine_traffic(d)  # batched entries in every log before the downgrade
    assert live_batched_entries_in(d)
    state = tmp_path / "s.json"
    with running(d):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state",
                                   str(state)]).exit_code == 0
        done = runner.invoke(app, ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--timeout", "90",
                                   "--interval", "0.5", "-o", "json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["safe"] is True
    assert not (d / "server.json").exists()  # stopped: local: reads go to the directory itself
    return d, state


def _status(d, state):
    result = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.slow
def test_reading_a_stopped_engine_changes_no_byte_and_keeps_the_proven_verdict(tmp_path):
    d, state = _safe_and_stopped(tmp_path)
    before = directory_fingerprint(d)
    code, report = _status(d, state)
    # Nobody reopened a store since the wait proved it: the verdict still holds, and the entry logs agree.
    assert code == 0 and report["safe"] is True, report["waitingByReason"]
    assert live_batched_entries_in(d) == []
    waited = runner.invoke(app, ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--timeout", "5",
                                 "-o", "json"])
    assert waited.exit_code == 0 and json.loads(waited.stdout)["safe"] is True
    for args in (["coordinators-list"], ["coordinator-stats"], ["coordinator-internal-stats", "-c", "0"],
                 ["pending-ack-stats", "-t", T, "-s", "sub-0"], ["pending-ack-internal-stats", "-t", T, "-s", "sub-0"],
                 ["transaction-buffer-stats", "-t", T], ["slow-transactions", "-t", "0"]):
        read = runner.invoke(app, ["-u", f"local:{d}", "transactions", *args])
        assert read.exit_code == 0, (args, read.output)
    assert runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state)]).exit_code == 0
    # Byte for byte: no ledger rolled or trimmed, no metadata (cursor, store open, engine id) written.
    assert directory_fingerprint(d) == before


@pytest.mark.slow
def test_a_reopen_while_stopped_and_reading_is_still_caught(tmp_path):
    """The view reports each store's last open as saved by the process that wrote its ledgers: an engine run in
    between with batching switched on (and off again before anyone looks) is seen as a reopen, never as safe."""
    d, state = _safe_and_stopped(tmp_path)
    update_dynamic(d, "transactionPendingAckBatchedWriteEnabled", "true")
    update_dynamic(d, "transactionLogBatchedWriteEnabled", "true")
    engine_traffic(d)  # a short run of the engine, batching again
    update_dynamic(d, "transactionPendingAckBatchedWriteEnabled", "false")
    update_dynamic(d, "transactionLogBatchedWriteEnabled", "false")
    before = directory_fingerprint(d)
    code, report = _status(d, state)
    assert code == 1 and report["safe"] is False
    reopened = {c["name"] for c in report["components"] if c.get("waitingFor") == "reopened since recording"}
    assert {"__transaction_log_0", "__transaction_log_1", f"{T}-sub-0__transaction_pending_ack"} <= reopened
    assert directory_fingerprint(d) == before


@pytest.mark.slow
def test_no_engine_starts_under_an_open_view_and_a_writer_without_server_is_refused(tmp_path):
    d, state = _safe_and_stopped(tmp_path)
    from txnadmin.admin.local import LocalAdmin

    # While a view is open (a `downgrade wait` polling), an engine cannot start underneath it and change what it
    # judges; once the view is closed it can.
    view = LocalAdmin(d, read_mostly=True)
    try:
        blocked = runner.invoke(app, ["engine", "run", str(d), "--duration", "0.5", "--rate", "0", "-o", "json"])
        assert blocked.exit_code != 0 and "Traceback" not in blocked.output
    finally:
        view.close()
    assert runner.invoke(app, ["engine", "run", str(d), "--duration", "0.5", "--rate", "0", "-o",
                               "json"]).exit_code == 0
    # A writer that serves no admin API (no server.json): refused with one line, not read mid-write.
    holder = subprocess.Popen(TXNADMIN[:1] + ["-c", "import sys; from txnadmin.engine.engine import Engine; "
                                              f"e = Engine({str(d)!r}, maintenance=False); print('open', flush=True); "
                                              "sys.stdin.readline(); e.close()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        refused = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state)])
        assert refused.exit_code == 3, refused.output
        assert f"process {holder.pid}" in refused.stderr and "serve" in refused.stderr
        assert "Traceback" not in refused.output
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_start_on_a_stopped_engine_opens_it_for_writing_and_status_then_sees_no_reopen(tmp_path):
    d = fresh_engine(tmp_path)
    engine_traffic(d)
    state = tmp_path / "s.json"
    started = runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state), "-o",
                                  "json"])
    assert started.exit_code == 0, started.output
    # The reloads happened in a writer open that saved each store's reopen; the stopped engine read afterwards
    # shows exactly those opens, so nothing counts as reopened since recording, and nothing is safe yet either:
    # the batched ledgers are still there.
    before = directory_fingerprint(d)
    code, report = _status(d, state)
    assert code == 1 and report["safe"] is False and REOPENED not in report["waitingByReason"]
    assert live_batched_entries_in(d)
    assert directory_fingerprint(d) == before



@pytest.mark.slow
def test_a_store_the_view_cannot_open_is_listed_not_loaded_never_deleted(tmp_path):
    """Absence of evidence is not "deleted": a store whose log the read-only view cannot open (here its managed
    ledger's record is gone) stays in the listing, answers 404, and keeps the verdict from being safe."""
    from txnadmin.engine.storage import LedgerStorage

    d, state = _safe_and_stopped(tmp_path)
    store = f"{T}-sub-0__transaction_pending_ack"
    with LedgerStorage.open(d) as storage:
        storage.meta_delete("managed-ledgers/public/default/persistent/txn-topic-0-sub-0__transaction_pending_ack")
    code, report = _status(d, state)
    assert code == 1 and report["safe"] is False
    comp = [c for c in report["components"] if c["name"] == store][0]
    assert not comp["done"] and comp["waitingFor"] == "store not loaded", comp
    listed = runner.invoke(app, ["-u", f"local:{d}", "transactions", "pending-ack-stats", "-t", T, "-s", "sub-0"])
    assert listed.exit_code == 1 and "not loaded" in listed.stderr


def _logical_metadata(d) -> list[str]:
    """metadata.db's content as SQL, read from a copy (with its write-ahead log) so reading it changes nothing."""
    import shutil
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name in ("metadata.db", "metadata.db-wal", "metadata.db-shm"):
            if (d / name).exists():
                shutil.copy(d / name, f"{tmp}/{name}")
        conn = sqlite3.connect(f"{tmp}/metadata.db")
        try:
            return list(conn.iterdump())
        finally:
            conn.close()


@pytest.mark.slow
def test_after_a_crash_reading_changes_no_metadata_and_no_entry_log(tmp_path):
    import signal
    import time

    d = fresh_engine(tmp_path)
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "100", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_served(d)
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (d / "server.json").unlink(missing_ok=True)  # what a killed server leaves behind (its pid is gone anyway)
    logs_before = {k: v for k, v in directory_fingerprint(d).items() if k.startswith("ledgers")}
    metadata_before = _logical_metadata(d)
    for args in (["coordinator-stats"], ["coordinator-internal-stats", "-c", "1"], ["coordinators-list"]):
        assert runner.invoke(app, ["-u", f"local:{d}", "transactions", *args]).exit_code == 0, args
    # SQLite may fold its write-ahead log into metadata.db on the first read (bytes move); no metadata changes.
    assert _logical_metadata(d) == metadata_before
    assert {k: v for k, v in directory_fingerprint(d).items() if k.startswith("ledgers")} == logs_before
