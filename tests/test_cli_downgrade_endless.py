"""Ways `txnadmin downgrade wait` could never end (issue #24, item 8), driven through the CLI with `-u local:PATH`
against a running engine (`engine run`, killed with -9 and started again as a broker restart).

- `start --no-reload`, a restart, `start --no-reload` again: the re-record took the ledger the restart's own reopen
  created for LastBatched, so the wait hung until that plain ledger rolled over (240 min by default).

Every "safe" is checked against the entry-log files once the engine has stopped.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from txnadmin.cli.main import app

from engine_helpers import live_batched_entries_in

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
REOPENED = "reopened since recording"


def local(d, *args, timeout=240):
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout)


def _json(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


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
        assert polled.returncode == 1 and _json(polled)["waitingByReason"].get(REOPENED), polled.stdout
        again = local(d, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert again.returncode == 0, again.stderr
        after_restart = _recorded(state)
        assert all(rec["batchingOff"] is True for rec in after_restart.values()), after_restart
        done = local(d, "downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5",
                     "-o", "json")
        report = _json(done)
        assert done.returncode == 0 and report["safe"] is True, (done.stderr, report["waitingByReason"])
        for comp in report["components"]:
            key = str(comp["coordinatorId"]) if comp["component"] == "coordinator" else comp["name"]
            # LastBatched is the ledger the log wrote before the restart, never the one its reopen created …
            assert comp["lastBatchedLedgerId"] == before_restart[key]["lastBatchedLedgerId"], comp
            # … so it is safe without another roll: the oldest live ledger is the one the reopen created.
            assert comp["oldestLedgerId"] == after_restart[key]["confirmedLedger"], comp
    assert live_batched_entries_in(d) == []


