"""`txnadmin rehearse` (what `make run` runs): the procedure, the scan and the engine must agree."""

from __future__ import annotations

import json

import pytest

from typer.testing import CliRunner

from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.cli.main import app
from txnadmin.engine.config import read_dynamic


@pytest.mark.slow
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


@pytest.mark.slow
def test_rehearsal_rides_out_shedding_and_a_restart_with_one_start(tmp_path, monkeypatch):
    """Issue #24 goal 5: the rehearsal's downgrade runs while a topic and a coordinator are unloaded every 2 s and the
    engine restarts mid-wait; it still ends SAFE, with `start` run once. Run as `make run` runs it (--discard): its
    temporary directory is gone at the end and the document says so."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the rehearsal's temporary directory, where we look
    result = CliRunner().invoke(app, ["rehearse", "--discard", "--warmup", "2", "--scan-engine", "python",
                                      "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["kept"] is False and out["directory"].startswith(str(tmp_path)) and list(tmp_path.iterdir()) == []
    moving = out["movingCluster"]
    assert out["safe"] is True and moving["restarts"] == 1 and moving["startRuns"] == 1
    assert moving["topicUnloads"] + moving["coordinatorUnloads"] > 0
    assert moving["rerecordedInWait"] >= 1  # the restart reopened every store: re-recorded, not accepted
    assert out["flagsOnAtVerdict"] == {}
    steps = [s["step"] for s in out["steps"]]
    assert steps.count("downgrade started") == 1 and "engine restarting" in steps
    verdict = next(s for s in out["steps"] if s["step"] == "procedure verdict")
    assert verdict["safe"] is True


def test_the_checklist_shows_flags_read_on_at_the_verdict_as_not_done():
    """The line about the flags comes from reading the broker, not from the procedure's report (whose
    flagsDisabled was true whenever a report existed): flags read on show an empty box."""
    from txnadmin.cli.rehearse import _checklist
    from txnadmin.procedures.rehearsal import RehearsalResult

    runner = CliRunner()
    import typer

    def show(flags_on):
        probe = typer.Typer()

        @probe.command()
        def main() -> None:
            _checklist(RehearsalResult("d", False, status={"flagsDisabled": True, "safe": True, "logs": 3},
                                       flags_on=flags_on))
        return runner.invoke(probe, []).stdout

    assert "[ ] batching disabled" in show({"127.0.0.1:6650": ["transactionLogBatchedWriteEnabled"]})
    assert "transactionLogBatchedWriteEnabled" in show({"127.0.0.1:6650": ["transactionLogBatchedWriteEnabled"]})
    assert "[ ] batching disabled" in show(None)  # could not be read: not done either
    assert "[x] batching disabled" in show({})


def test_the_verdict_line_says_once_where_the_files_are_or_that_they_went(tmp_path):
    """`make run` runs `rehearse --discard`: the verdict line says the files were removed, not where they were."""
    from txnadmin.cli.rehearse import _checklist
    from txnadmin.procedures.rehearsal import RehearsalResult

    import typer

    def verdict(kept: bool) -> str:
        probe = typer.Typer()

        @probe.command()
        def main() -> None:
            _checklist(RehearsalResult(str(tmp_path / "r"), True, kept=kept))
        return CliRunner().invoke(probe, []).stdout.splitlines()[-1]

    assert verdict(True) == f"verdict: SAFE to downgrade   (files in {tmp_path / 'r'})"
    assert verdict(False) == ("verdict: SAFE to downgrade   (its files were removed; keep them with: txnadmin rehearse "
                              "--dir DIR)")
    refused = CliRunner().invoke(app, ["rehearse", "--discard", "--dir", str(tmp_path / "d")])
    assert refused.exit_code == 2 and "--discard goes without --dir" in refused.stderr
    assert not (tmp_path / "d").exists()


def test_no_java_a_bad_scan_engine_or_bad_seconds_are_refused_before_the_rehearsal_starts(tmp_path):
    import os
    import subprocess
    import sys

    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(no_java)  # no java anywhere
    for engine, code, says, *more in (("spark", 3, "--scan-engine python"), ("bogus", 2, "use auto, spark or python"),
                                      ("python", 2, "--warmup -1: not a number", "--warmup", "-1"),
                                      ("python", 2, "--timeout nan: not a number", "--timeout", "nan")):
        done = subprocess.run([sys.executable, "-m", "txnadmin", "rehearse", "--dir", str(tmp_path / engine),
                               "--scan-engine", engine, *more], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == code, done.stderr
        assert done.stderr.count("\n") == 1 and says in done.stderr and "unexpected" not in done.stderr
        assert done.stdout == "" and not (tmp_path / engine / "engine").exists()  # refused before any step
