"""`txnadmin rehearse` (what `make run` runs): the procedure, the scan and the engine must agree."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.cli.main import app
from txnadmin.engine.config import read_dynamic


def test_rehearsal_reaches_safe_and_all_three_agree(tmp_path):
    result = CliRunner().invoke(app, ["rehearse", "--dir", str(tmp_path), "--warmup", "2", "--scan-engine", "python",
                                      "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["safe"] is True
    # The procedure's own word is not the evidence: the engine's stored dynamic config must have both flags off, and
    # the verdict must cover every log the procedure recorded, none still waiting.
    dynamic = read_dynamic(tmp_path / "engine")
    assert dynamic.get(TC_BATCH_FLAG) == "false" and dynamic.get(PENDING_ACK_BATCH_FLAG) == "false", dynamic
    started = next(s for s in out["steps"] if s["step"] == "downgrade started")
    assert out["status"]["safe"] and out["status"]["waiting"] == 0
    assert out["status"]["logs"] >= started["coordinators"] + started["pendingAckStores"] > 0
    assert out["scan"]["verdict"] == "clean" and out["engineCensusLiveBatchedEntries"] == 0
    steps = [s["step"] for s in out["steps"]]
    assert steps[0] == "engine created" and steps[-1] == "verdict"
    batched_before = next(s for s in out["steps"] if s["step"] == "workload running with batching on")
    assert batched_before["batchedEntries"] > 0  # there was something to downgrade from
    assert (tmp_path / "txnadmin-downgrade.json").exists() and (tmp_path / "dump" / "ledgers.txt").exists()
