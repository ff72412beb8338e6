"""A served engine of several brokers under a workload (`txnadmin engine run`), for the downgrade's tests that
need real brokers: started as an operator starts it, stopped with Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from test_engine_brokers import brokers, until

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
# Small ledgers that roll quickly, and both batching flags on: the logs hold batched entries within a second.
SMALL = ["--set", "managedLedgerMaxEntriesPerLedger=20", "--set", "managedLedgerMinLedgerRolloverTimeMinutes=0",
         "--set", "managedLedgerMaxLedgerRolloverTimeMinutes=0.02", "--set", "transactionPendingAckLogIndexMinLag=5",
         "--set", "transactionLogBatchedWriteEnabled=true", "--set", "transactionPendingAckBatchedWriteEnabled=true"]


def run_engine(home: Path, d: Path, *extra: str) -> subprocess.Popen:
    """`engine run` on ``d`` (a workload at 60 transactions/s), returned once every broker listens."""
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    run = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "60", "--topics", "2",
                                       "--subscriptions", "2", "-o", "json", *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    until(lambda: (d / "server.json").exists() and brokers(d), "the engine's brokers listening", 60)
    return run


def stop_engine(run: subprocess.Popen) -> str:
    """Ctrl-C, as an operator stops it; its stderr (never a traceback)."""
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert "Traceback" not in err
    return err


def batched_written(d: Path) -> bool:
    """Some entry log of ``d`` holds a batched entry's prefix (the workload has written batched records)."""
    return b"\x0e\x01" in b"".join(p.read_bytes() for p in d.rglob("*.log"))
