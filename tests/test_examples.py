"""The scripts in examples/ work as users run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_helpers import wait_served

pytestmark = pytest.mark.slow  # the example scripts run whole workloads end to end

ROOT = Path(__file__).resolve().parent.parent
TXNADMIN = str(Path(sys.executable).parent / "txnadmin")


def test_ci_smoke_script():
    out = subprocess.run(["bash", str(ROOT / "examples" / "ci-smoke.sh")], capture_output=True, text=True,
                         env=dict(os.environ, TXNADMIN=TXNADMIN), timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "smoke: ok" in out.stdout
    assert "smoke: doctor healthy (8 checks, strict=True)" in out.stdout  # the smoke gates on doctor --strict


def _checklist_on_a_running_engine(tmp_path, *run_args: str, timeout_s: str = "90"):
    """The checklist script against `engine run` (batching on, small ledgers), with ``run_args`` added."""
    engine = tmp_path / "engine"
    subprocess.run([TXNADMIN, "engine", "init", str(engine), "-c", "2",
                    "--set", "transactionLogBatchedWriteEnabled=true",
                    "--set", "transactionPendingAckBatchedWriteEnabled=true",
                    "--set", "managedLedgerMaxEntriesPerLedger=50",
                    "--set", "managedLedgerMinLedgerRolloverTimeMinutes=0",
                    "--set", "managedLedgerMaxLedgerRolloverTimeMinutes=0.05",
                    "--set", "transactionPendingAckLogIndexMinLag=10"], check=True, capture_output=True)
    # --duration 0: the engine runs until terminated below, however long a loaded machine makes the wait
    run = subprocess.Popen([TXNADMIN, "engine", "run", str(engine), "--duration", "0", "--rate", "100", *run_args,
                            "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_served(engine)
        time.sleep(1.5)
        out = subprocess.run(["bash", str(ROOT / "examples" / "downgrade-checklist.sh"), f"local:{engine}",
                              str(tmp_path / "state.json"), timeout_s], capture_output=True, text=True,
                             env=dict(os.environ, TXNADMIN=TXNADMIN), timeout=int(timeout_s) + 150)
    finally:
        run.terminate()
        run.wait(timeout=60)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "3/3 safe" in out.stdout
    return engine


def test_downgrade_checklist_against_a_running_engine(tmp_path):
    engine = _checklist_on_a_running_engine(tmp_path)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["target"] == f"local:{engine}" and state["phase"] == "recorded"


def test_downgrade_checklist_runs_unattended_on_an_engine_that_sheds_load(tmp_path):
    """Issue #24: `engine run --fault shed=3` unloads a topic and a coordinator every 3 s while the script's
    `wait --rerecord --yes` runs; the script still ends safe with one `start`."""
    _checklist_on_a_running_engine(tmp_path, "--fault", "shed=3", timeout_s="150")
    report = json.loads((tmp_path / "state.json.status.json").read_text())
    assert report["safe"] is True
