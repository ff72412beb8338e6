"""Every command doctor prints runs as pasted, with the flag it means (issue 34 points 1 and 2).

Doctor's fix lines used to read `txnadmin … set-txn-pending-ack-batch-log` (pasted: "give --enable or --disable"),
`… --enable|--disable --reload`, `txnadmin metrics <broker>/metrics` and `set transactionLogBatchedWriteMaxDelayInMillis=5`
(no command at all, and a setting Pulsar does not take at runtime). Here an operator's session on a running engine:
doctor's findings are produced for real, and every `txnadmin …` command in them is pasted on a terminal, answered
"y" where it asks, and must do what it said."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_helpers import wait_served
from pty_helpers import Terminal
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.procedures.doctor import Survey, parse_thresholds
from txnadmin.procedures.doctor.checks import batched_log

TXNADMIN = [sys.executable, "-m", "txnadmin"]
COMMAND = re.compile(r"`(txnadmin [^`]*)`")


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXNADMIN_ADMIN_URL", "PULSAR_CLIENT_CONF", "PULSAR_HOME", "TXNADMIN_ENGINE_DIR")}
    env.update(TXNADMIN_HOME=str(tmp_path / "home"), HOME=str(tmp_path / "home"), COLUMNS="200")
    return env


def _txnadmin(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*TXNADMIN, *args], env=env, capture_output=True, text=True, timeout=120)


def _doctor(env, url: str, *only: str) -> list[dict]:
    at_once = ("--threshold", "stuck-margin=0s", "--threshold", "stalled=0s")  # findings now, not in a minute
    result = _txnadmin(env, "-u", url, "doctor", "-o", "json", *at_once, *(("--only", ",".join(only)) if only else ()))
    assert result.returncode in (0, 1, 3), result.stderr
    return json.loads(result.stdout)["findings"]


def _commands(findings: list[dict]) -> list[str]:
    return [cmd for f in findings for text in (f["why"], f["fix"]) for cmd in COMMAND.findall(text)]


def _paste(line: str, env: dict, until_served: Path | None = None) -> tuple[int, str]:
    """``line`` run as an operator pastes it, on a terminal, answering "y" if it asks. ``until_served``: a command
    that runs until stopped (`engine run DIR`) is stopped with Ctrl-C once it serves that directory."""
    argv = shlex.split(line)
    assert argv[0] == "txnadmin" and "<" not in line and "|" not in line, line  # a command, not a template
    terminal = Terminal([*TXNADMIN, *argv[1:]], env)
    terminal.write(b"y\n")  # the terminal holds the answer until the command asks
    deadline = time.monotonic() + 120
    try:
        served = None if until_served is None else until_served / "server.json"
        if served is not None and not terminal.read(120, 0.1, until=served.exists) and served.exists():
            terminal.process.send_signal(signal.SIGINT)
        terminal.read(max(0.0, deadline - time.monotonic()), 0.1)
    finally:
        terminal.close()
    return terminal.process.wait(timeout=60), terminal.out.decode(errors="replace")


def _runtime(engine: Path) -> dict:
    from txnadmin.admin.local import LocalAdmin

    with LocalAdmin(engine, read_mostly=True) as admin:
        return admin.runtime_config()


@pytest.mark.slow
def test_every_command_doctor_prints_runs_as_pasted_and_means_what_it_says(tmp_path):
    env = _env(tmp_path)
    engine = tmp_path / "eng"
    url = f"local:{engine}"
    on = ["--set", f"{TC_BATCH_FLAG}=true", "--set", f"{PENDING_ACK_BATCH_FLAG}=true"]
    assert _txnadmin(env, "engine", "init", str(engine), "-c", "2", *on).returncode == 0
    # stuck-open: transactions left OPEN past their timeout, for the stuck-transactions and max-read-position fixes
    run = subprocess.Popen([*TXNADMIN, "engine", "run", str(engine), "--duration", "0", "--rate", "50",
                            "--txn-timeout-ms", "300", "--fault", "stuck-open"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pasted: list[str] = []
    try:
        wait_served(engine)
        time.sleep(1)  # some batched flushes for the writers' advice
        # 1. batching on, no change recorded by txnadmin: the info finding's command, and the tuning advice
        first = _doctor(env, url)  # every check: each fix line any of them prints here is pasted below
        tuning = [f for f in first if f["subject"] in ("transaction coordinator log", "pending-ack store")]
        assert tuning and not [f for f in tuning if re.search(r"(?<!-)\bset transaction", f["fix"])], tuning  # no `set k=v`
        commands = _commands(first)
        assert any("abort-transaction" in c for c in commands) and any(" doctor --fix" in c for c in commands)
        record = next(c for c in commands if "set-txn-pending-ack-batch-log" in c)
        assert record == f"txnadmin -u {url} transactions set-txn-pending-ack-batch-log --enable --reload", record
        code, out = _paste(record, env)
        pasted.append(record)
        assert code == 0, out
        assert f"{PENDING_ACK_BATCH_FLAG} = true (was true)" in out and "reloaded" in out, out  # the flag as it was
        # 2. mid-downgrade: both flags switched off without reopening anything
        for name in ("set-txn-tc-batch-log", "set-txn-pending-ack-batch-log"):
            assert _txnadmin(env, "-u", url, "transactions", name, "--disable").returncode == 0
        second = _doctor(env, url, "batched-log")
        for f in (f for f in second if f["subject"] in ("transaction coordinator log", "pending-ack store")):
            assert f["fix"] == "nothing to do" and "switched off" in f["why"], f  # no tuning while batching is off
        reopen = [c for c in _commands(second) if "--reload" in c]
        assert sorted(reopen) == sorted(f"txnadmin -u {url} transactions {name} --disable --reload"
                                        for name in ("set-txn-tc-batch-log", "set-txn-pending-ack-batch-log"))
        for line in reopen:
            code, out = _paste(line, env)
            pasted.append(line)
            assert code == 0 and "= false (was false)" in out and "reloaded" in out, out  # still off, reopened
        assert not [f for f in _doctor(env, url, "batched-log") if f["severity"] == "warning"]  # fixed
        rest = [c for c in dict.fromkeys(commands) if c not in pasted and " engine " not in c]
        for line in rest:  # anything else doctor said on the way runs as well (a transaction may end meanwhile: 1)
            code, out = _paste(line, env)
            assert code in (0, 1, 3) and "Usage" not in out and "Error:" not in out and "give " not in out, (line, out)
    finally:
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    # 3. the tuning advice, pasted in its order: engine stopped (above), settings written, engine started again
    steps = list(dict.fromkeys(c for f in tuning for c in COMMAND.findall(f["fix"])))  # each distinct one once
    assert steps and all(c.startswith(("txnadmin engine init", "txnadmin engine run")) for c in steps), steps
    for line in steps:
        code, out = _paste(line, env, until_served=engine if " run " in f"{line} " else None)
        assert code in (0, 130) and "Usage" not in out and "Error" not in out, (line, out)
    wanted = dict(kv.split("=") for c in steps for kv in re.findall(r"--set (\S+)", c))
    assert wanted and all(_runtime(engine)[k] == v for k, v in wanted.items()), wanted


def test_no_fix_line_of_the_batched_log_check_is_a_template(tmp_path):
    """The branches a running engine does not reach (metrics unreadable, a broker's URL): still whole commands."""
    for target in ("http://broker:8080", f"local:{tmp_path}"):
        for flag in ("true", "false"):
            for metrics in ((None, "HTTP 404"), ("<html>login</html>", "ok")):
                s = Survey(now_ms=1, clock="target", target=target, coordinators=[{"id": 0}],
                           runtime={TC_BATCH_FLAG: flag, PENDING_ACK_BATCH_FLAG: flag}, metrics=metrics,
                           batch_changes={PENDING_ACK_BATCH_FLAG: None, TC_BATCH_FLAG: None})
                for finding in batched_log.check(s, parse_thresholds([])):
                    for line in COMMAND.findall(finding.fix):
                        assert "<" not in line and "|" not in line, line
                        shlex.split(line)
