"""`txnadmin rehearse` (what `make run` runs): the procedure, the scan and the engine must agree."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txnadmin.cli.main import app


def test_rehearsal_reaches_safe_and_all_three_agree(tmp_path):
    result = CliRunner().invoke(app, ["rehearse", "--dir", str(tmp_path), "--warmup", "2", "--scan-engine", "python",
                                      "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["safe"] is True
    assert out["status"]["safe"] and out["status"]["flagsDisabled"]
    assert out["scan"]["verdict"] == "clean" and out["engineCensusLiveBatchedEntries"] == 0
    steps = [s["step"] for s in out["steps"]]
    assert steps[0] == "engine created" and steps[-1] == "verdict"
    batched_before = next(s for s in out["steps"] if s["step"] == "workload running with batching on")
    assert batched_before["batchedEntries"] > 0  # there was something to downgrade from
    assert (tmp_path / "txnadmin-downgrade.json").exists() and (tmp_path / "dump" / "ledgers.txt").exists()
