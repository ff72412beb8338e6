"""An engine of several brokers for tests: the CLI in this process, the brokers server.json names, and a served
engine under a workload (`txnadmin engine run`), started as an operator starts it and stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from txnadmin.cli.main import app

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in this process (Typer's runner: no interpreter start per call), as a finished process."""
    result = CliRunner().invoke(app, list(args), env={"TXNADMIN_HOME": str(home)})
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def init(home: Path, d: Path, *args: str) -> None:
    done = cli(home, "engine", "init", str(d), "-c", "4", *args)
    assert done.returncode == 0, done.stderr


def brokers(d: Path) -> list[dict]:
    return json.loads((d / "server.json").read_text())["brokers"]


def until(check, what: str, timeout_s: float = 20.0):
    """Poll ``check`` until it returns something true (bounded; never a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout_s:g} s")


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
    # server.json is written before the listeners start (whoever connects must find the token): wait for them
    until(lambda: (d / "server.json").exists() and brokers(d) and all(accepts(b["id"]) for b in brokers(d)),
          "the engine's brokers listening", 60)
    return run


def accepts(broker_id: str) -> bool:
    host, _, port = broker_id.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def stop_engine(run: subprocess.Popen) -> str:
    """Ctrl-C, as an operator stops it; its stderr (never a traceback)."""
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert "Traceback" not in err
    return err


def batched_written(d: Path) -> bool:
    """Some entry log of ``d`` holds a batched entry's prefix (the workload has written batched records)."""
    return b"\x0e\x01" in b"".join(p.read_bytes() for p in d.rglob("*.log"))
