"""`downgrade`/`upgrade` never act on a target the operator did not name, say which one they act on, and ask first;
a checklist recorded on one target is refused on another (in this process, on engine directories and over serve)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import pytest

from typer.testing import CliRunner

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.cli.main import app
from txnadmin.procedures.downgrade import DowngradeError, start, status

from downgrade_helpers import BATCHED, TOKEN, TXNADMIN, cli, fresh_engine, load, loaded_engine, running, serve_process
from engine_helpers import open_engine

runner = CliRunner()


def _clean_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXNADMIN_ADMIN_URL", "PULSAR_CLIENT_CONF", "PULSAR_HOME")}
    env["TXNADMIN_HOME"] = str(tmp_path / "home")
    env["HOME"] = str(tmp_path / "home")
    return env


@pytest.mark.slow
def test_no_target_or_an_empty_one_is_refused(tmp_path):
    env = _clean_env(tmp_path)
    # A local engine exists in the default place: it must still not be used implicitly.
    assert runner.invoke(app, ["engine", "init", str(tmp_path / "home" / "engine")], env=env).exit_code == 0
    state = str(tmp_path / "s.json")
    for args in (["downgrade", "start", "--yes", "--state", state], ["downgrade", "status", "--state", state],
                 ["downgrade", "wait", "--state", state, "--timeout", "1"], ["upgrade", "--yes"]):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 2, (args, result.output)
        assert "needs a named target" in result.stderr and "-u" in result.stderr
        empty = runner.invoke(app, args + ["-u", ""], env=env)
        assert empty.exit_code == 2 and "--admin-url is empty" in empty.stderr, (args, empty.output)
    assert not (tmp_path / "s.json").exists()
    # pulsar-admin parity: an empty URL is a failure with exit 1 there.
    parity = runner.invoke(app, ["-u", "", "transactions", "coordinators-list"], env=env)
    assert parity.exit_code == 1


def test_the_environment_names_a_target_and_output_says_so(tmp_path):
    d = fresh_engine(tmp_path)
    env = dict(_clean_env(tmp_path), TXNADMIN_ADMIN_URL=f"local:{d}")
    result = runner.invoke(app, ["downgrade", "start", "--dry-run", "--state", str(tmp_path / "s.json"), "-o", "json"],
                           env=env)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["dryRun"] and plan["plan"]["target"] == f"local:{d} (from $TXNADMIN_ADMIN_URL)"
    assert plan["plan"]["coordinators"] == 2


def test_dry_run_changes_nothing_and_no_terminal_refuses(tmp_path):
    d = fresh_engine(tmp_path)
    state = tmp_path / "s.json"
    dry = runner.invoke(app, ["downgrade", "start", "-u", f"local:{d}", "--state", str(state), "--dry-run"])
    assert dry.exit_code == 0 and "unload 2 coordinators" in dry.stdout and "nothing was changed" in dry.stdout
    assert not state.exists()
    flags = runner.invoke(app, ["-u", f"local:{d}", "transactions", "get-txn-tc-batch-log-stat", "-o", "json"])
    assert json.loads(flags.stdout)["txnTcBatchLogEnabled"] is True  # still on: nothing changed
    asked = runner.invoke(app, ["downgrade", "start", "-u", f"local:{d}", "--state", str(state)])
    assert asked.exit_code == 2 and "--yes" in asked.stderr and not state.exists()
    up = runner.invoke(app, ["upgrade", "-u", f"local:{d}", "--dry-run"], env={"TXNADMIN_HOME": str(tmp_path / "h")})
    assert up.exit_code == 0 and "nothing was changed" in up.stdout


@pytest.mark.slow
def test_a_checklist_from_another_engine_is_refused_through_the_cli(tmp_path):
    a = fresh_engine(tmp_path)
    b = tmp_path / "b"
    assert runner.invoke(app, ["engine", "init", str(b), "-c", "2"]).exit_code == 0  # batching already off here
    state = tmp_path / "s.json"
    with running(a):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{a}", "--state",
                                   str(state)]).exit_code == 0
    for cmd in (["downgrade", "start", "--yes"], ["downgrade", "status"]):
        result = runner.invoke(app, cmd + ["-u", f"local:{b}", "--state", str(state)])
        assert result.exit_code == 3, result.output
        assert "recorded on another target" in result.stderr and "reset" in result.stderr


@contextlib.contextmanager
def _served_and_started(tmp_path):
    """A loaded engine served without traffic, `downgrade start` done on it: its idle subscription's store never
    trims, so no wait on it can turn safe, however fast or slow the machine is."""
    from serve_helpers import serving

    d = loaded_engine(tmp_path)
    state = tmp_path / "s.json"
    with serving(d, tmp_path / "home"):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state",
                                   str(state)]).exit_code == 0
        yield d, state


@pytest.mark.slow
def test_ctrl_c_during_wait_keeps_the_checklist_and_exits_130(tmp_path):
    with _served_and_started(tmp_path) as (d, state):
        before = state.read_text()
        proc = subprocess.Popen(TXNADMIN + ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state),
                                            "--interval", "30", "--timeout", "600"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Interrupt only once the wait has shown its first poll: earlier, Python may not have started at all.
        assert proc.stderr is not None
        first = proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
        err = first + rest
    assert proc.returncode == 130, err
    assert "downgrade wait" in err and "Traceback" not in err
    assert json.loads(state.read_text())["phase"] == json.loads(before)["phase"]


@pytest.mark.slow
def test_wait_on_a_stopped_engine_polls_once_and_says_to_start_it(tmp_path):
    with _served_and_started(tmp_path) as (d, state):
        pass
    # Stopped, with an idle store still waiting: nothing can change while the engine is read, so a long --timeout
    # would only keep it from starting. (The subprocess limit is far below --timeout: a wait that polled on fails.)
    proc = subprocess.run(TXNADMIN + ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--interval",
                                      "30", "--timeout", "600", "-o", "json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and json.loads(proc.stdout)["safe"] is False
    assert "is stopped" in proc.stderr and "engine run" in proc.stderr and "Traceback" not in proc.stderr


def test_a_checklist_from_another_target_is_refused(tmp_path):
    with open_engine(tmp_path / "a", **BATCHED) as a:
        load(a)
        start(LocalAdmin(a), tmp_path / "s.json", "local:" + str(tmp_path / "a"))
    with open_engine(tmp_path / "b", **BATCHED) as b:
        load(b)
        admin = LocalAdmin(b)
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        admin.update_dynamic_config("transactionPendingAckBatchedWriteEnabled", "false")
        for call in (lambda: start(admin, tmp_path / "s.json", "local:" + str(tmp_path / "a")),
                     lambda: status(admin, tmp_path / "s.json")):
            with pytest.raises(DowngradeError, match="recorded on another target.*--state.*reset") as err:
                call()
            assert err.value.exit_code == 3


@pytest.mark.slow
def test_dry_run_and_a_checklist_from_another_target_through_serve(tmp_path):
    """--dry-run changes nothing on an http:// target either; a checklist recorded against one served engine is
    refused against another, saying how to proceed."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = loaded_engine(tmp_path / "a"), loaded_engine(tmp_path / "b")
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path / "a", a) as (url_a, _), serve_process(tmp_path / "b", b) as (url_b, _):
        dry = cli(url_a, "downgrade", "start", "--dry-run", "--state", state)
        assert dry.returncode == 0 and "nothing was changed" in dry.stdout, dry.stderr
        assert not (tmp_path / "s.json").exists()
        flags = HttpAdmin(url_a, token=TOKEN).runtime_config()
        assert flags["transactionLogBatchedWriteEnabled"] == "true"  # still on: nothing changed
        assert cli(url_a, "downgrade", "start", "--yes", "--state", state).returncode == 0
        for cmd in (["downgrade", "start", "--yes"], ["downgrade", "status"]):
            refused = cli(url_b, *cmd, "--state", state)
            assert refused.returncode == 3, refused.stderr
            assert "recorded on another target" in refused.stderr and "reset" in refused.stderr
            assert "Traceback" not in refused.stderr
