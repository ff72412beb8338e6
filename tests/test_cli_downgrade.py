"""`txnadmin downgrade` end to end through the CLI on an engine directory, including kill -9 mid-start."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml

from typer.testing import CliRunner

from txnadmin.cli.main import app
from engine_helpers import wait_served

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def _engine(tmp_path):
    d = tmp_path / "e"
    sets = ["managedLedgerMaxEntriesPerLedger=20", "managedLedgerMinLedgerRolloverTimeMinutes=0",
            "transactionPendingAckLogIndexMinLag=5", "transactionLogBatchedWriteEnabled=true",
            "transactionPendingAckBatchedWriteEnabled=true"]
    args = ["engine", "init", str(d), "-c", "2"]
    for s in sets:
        args += ["--set", s]
    assert runner.invoke(app, args).exit_code == 0
    return d


@contextlib.contextmanager
def _running(d):
    """The engine as a live broker: `engine run` in the background (its loopback server takes local: calls)."""
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "150",
                                        "--concurrency", "4", "--abort-ratio", "0", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_served(d)
        time.sleep(1.0)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _load(d, seconds="1.5"):
    result = runner.invoke(app, ["engine", "run", str(d), "--duration", seconds, "--rate", "0", "--concurrency", "4",
                                 "--abort-ratio", "0", "-o", "json"])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_start_status_json_and_exit_codes(tmp_path):
    d = _engine(tmp_path)
    state = tmp_path / "checklist.json"
    with _running(d):
        started = runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state),
                                      "-o", "json"])
        assert started.exit_code == 0, started.output
        summary = json.loads(started.stdout)
        assert summary["coordinators"] == 2 and summary["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        waiting = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
        assert waiting.exit_code in (0, 1), waiting.output
        report = json.loads(waiting.stdout)
        assert report["target"]["url"] == f"local:{d}" and report["target"]["source"] == "--admin-url"
        for comp in report["components"]:
            assert {"component", "name", "lastBatchedLedgerId", "oldestLedgerId", "done", "reason"} <= set(comp)
        done = runner.invoke(app, ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--timeout", "60",
                                   "--interval", "0.5", "-o", "json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["safe"] is True
    # The engine stopped: reading it through local: reopens nothing, so the proven verdict stands …
    stopped = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert stopped.exit_code == 0 and json.loads(stopped.stdout)["safe"] is True, stopped.output
    # … until the engine runs again: every store reopened, and nobody can say with which flags.
    _load(d, "0.3")
    after = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert after.exit_code == 1 and json.loads(after.stdout)["waitingByReason"].get("reopened since recording")
    # -o yaml says why each log waits in the same words (plain strings: YAML's safe dumper refuses an enum)
    as_yaml = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "yaml"])
    assert as_yaml.exit_code == 1, as_yaml.output
    waiting = {k: v for k, v in yaml.safe_load(as_yaml.stdout).items() if k in ("waitingByReason", "components")}
    assert waiting == {k: v for k, v in json.loads(after.stdout).items() if k in ("waitingByReason", "components")}


def test_unreadable_target_and_missing_checklist(tmp_path):
    missing = runner.invoke(app, ["downgrade", "status", "-u", f"local:{tmp_path / 'nope'}", "--state",
                                  str(tmp_path / "s.json")])
    assert missing.exit_code == 3 and "engine init" in missing.stderr
    d = _engine(tmp_path)
    no_state = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(tmp_path / "s.json")])
    assert no_state.exit_code == 1 and "downgrade start" in no_state.stderr
    garbage = tmp_path / "bad.json"
    garbage.write_text("{not json")
    bad = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(garbage)])
    assert bad.exit_code == 3 and "bad.json" in bad.stderr


@pytest.mark.slow
def test_killed_start_resumes_to_the_same_verdict(tmp_path):
    d = _engine(tmp_path)
    state = tmp_path / "s.json"
    rng = random.Random(7)
    with _running(d):
        for _ in range(3):
            proc = subprocess.Popen(TXNADMIN + ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state",
                                                str(state)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if state.exists():
                json.loads(state.read_text())  # never half-written
        final = subprocess.run(TXNADMIN + ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state),
                                           "-o", "json"], capture_output=True, text=True)
        assert final.returncode == 0, final.stderr
        done = runner.invoke(app, ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--timeout", "60",
                                   "--interval", "0.5", "-o", "json"])
        assert done.exit_code == 0, done.output


@pytest.mark.slow
def test_verify_folds_the_scan_into_the_verdict(tmp_path):
    d = _engine(tmp_path)
    state = tmp_path / "s.json"
    _load(d)
    with _running(d):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state",
                                   str(state)]).exit_code == 0
    # Right after `start`, the batched ledgers are still live: the dump holds batched entries in them. (Taken after
    # `start`, whose reloads open new ledgers: a dump from before lacks them, and verify refuses it.)
    assert runner.invoke(app, ["engine", "dump", str(d), "--out", str(tmp_path / "before")]).exit_code == 0
    dirty = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(tmp_path / "before" /
                                "ledgers"), "--ledgers", str(tmp_path / "before" / "ledgers.txt"), "--state",
                                str(state), "--engine", "python", "-o", "json"])
    assert dirty.exit_code == 1 and json.loads(dirty.stdout)["verdict"] == "batched"
    _load(d, "3")
    status = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert json.loads(status.stdout)["safe"] is False  # the recorded scan said batched
    # More traffic rolls and trims the batched ledgers; how much depends on the machine's speed, so load in rounds
    # until the dump proves clean (bounded) rather than for a fixed time.
    for attempt in range(8):
        after = tmp_path / f"after-{attempt}"
        assert runner.invoke(app, ["engine", "dump", str(d), "--out", str(after)]).exit_code == 0
        clean = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(after / "ledgers"),
                                    "--ledgers", str(after / "ledgers.txt"), "--state", str(state), "--engine",
                                    "python"])
        if clean.exit_code != 1:
            break
        _load(d, "2")
    assert clean.exit_code == 0, clean.output
    final = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert json.loads(final.stdout)["verification"]["verdict"] == "clean"
    assert final.exit_code == 1  # clean dumps, but the engine restarted (reopened) since recording: not a proof
