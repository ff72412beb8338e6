"""An interrupted downgrade resumes: `start` killed with -9 at random moments never leaves a half-written
checklist and a re-run reaches the same verdict; Ctrl-C during `wait` keeps the checklist, exits 130 and says how to
resume."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

from downgrade_helpers import TOKEN, TXNADMIN, cli, fresh_engine, loaded_engine, running, serve_process

runner = CliRunner()


@pytest.mark.slow
def test_killed_start_resumes_to_the_same_verdict(tmp_path):
    d = fresh_engine(tmp_path)
    state = tmp_path / "s.json"
    rng = random.Random(7)
    with running(d):
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
def test_ctrl_c_during_wait_through_serve_keeps_the_checklist_and_exits_130(tmp_path):
    import signal

    d = loaded_engine(tmp_path)  # no traffic: its idle subscription's store never trims, so the wait cannot end safe
    state = tmp_path / "s.json"
    with serve_process(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        before = json.loads(state.read_text())
        waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                              "--state", str(state), "--interval", "30", "--timeout", "600"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert waiter.stderr is not None
        first = waiter.stderr.readline()  # its first poll shown: Python is up and the wait under way
        waiter.send_signal(signal.SIGINT)
        out, rest = waiter.communicate(timeout=60)
        err = first + rest
    assert waiter.returncode == 130, err
    assert "downgrade wait" in err and "Traceback" not in err  # how to resume
    after = json.loads(state.read_text())
    assert after["phase"] == before["phase"] == "recorded"
    assert after["pendingAckStores"].keys() == before["pendingAckStores"].keys()
