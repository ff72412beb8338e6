"""Issue #26, points 5 (engine directories), 6 (exit codes), 7 (wrong input), 8 (scanning a dump) and 10 (quiet):
each through the CLI, against real engine directories, dumps and processes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.config import EngineConfig

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
TXNADMIN = [sys.executable, "-m", "txnadmin"]
BATCHED = ["--set", "transactionLogBatchedWriteEnabled=true", "--set", "transactionPendingAckBatchedWriteEnabled=true"]


def _txnadmin(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The installed entry point's behaviour (main(): its exit-code mapping), in a process of its own."""
    return subprocess.run([*TXNADMIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _init(path: Path, *args: str) -> None:
    result = runner.invoke(app, ["engine", "init", str(path), "-c", "1", *args])
    assert result.exit_code == 0, result.output


# -- 5: every engine subcommand takes --dir; those without another argument take DIR too ---------------------------

def _engine_commands() -> dict:
    found = {}

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                if path or name == "engine":
                    walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def test_every_engine_subcommand_takes_dir_and_positionally_where_nothing_else_is_positional():
    commands = _engine_commands()
    assert {"engine init", "engine run", "engine dump", "engine recover", "engine set", "engine txn begin",
            "engine txn commit", "engine txn abort"} <= set(commands)
    for name, command in commands.items():
        options = {opt for p in command.params if p.param_type_name == "option" for opt in p.opts}
        arguments = [p.name for p in command.params if p.param_type_name == "argument"]
        assert "--dir" in options, name
        if name == "engine set":
            assert arguments == ["words"]  # [DIR] NAME=VALUE... or NAME VALUE (tests/test_cli_engine_forms.py)
        else:
            assert arguments == ["directory"], name


def test_dir_given_either_way_acts_on_that_engine(tmp_path):
    engine = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", "--dir", str(engine), "-c", "1"]).exit_code == 0
    begun = runner.invoke(app, ["engine", "txn", "begin", str(engine), "--produce", "t=x"])
    assert begun.exit_code == 0, begun.output
    txn = json.loads(begun.stdout)["txnId"]
    committed = runner.invoke(app, ["engine", "txn", "commit", str(engine), "--txn-id", txn])
    assert committed.exit_code == 0 and json.loads(committed.stdout)["status"] == "COMMITTED", committed.output
    second = json.loads(runner.invoke(app, ["engine", "txn", "begin", "--dir", str(engine)]).stdout)["txnId"]
    aborted = runner.invoke(app, ["engine", "txn", "abort", "--dir", str(engine), "--txn-id", second])
    assert aborted.exit_code == 0 and json.loads(aborted.stdout)["status"] == "ABORTED", aborted.output
    assert runner.invoke(app, ["engine", "set", "transactionLogBatchedWriteEnabled", "true", "--dir",
                               str(engine)]).exit_code == 0
    assert runner.invoke(app, ["engine", "recover", "--dir", str(engine)]).exit_code == 0
    assert runner.invoke(app, ["engine", "dump", "--dir", str(engine), "--out", str(tmp_path / "d")]).exit_code == 0
    assert (tmp_path / "d" / "ledgers.txt").is_file()
    # the same directory both ways is one engine; two different ones are refused, never guessed between
    assert runner.invoke(app, ["engine", "txn", "begin", str(engine), "--dir", str(engine)]).exit_code == 0
    other = tmp_path / "other"
    both = runner.invoke(app, ["engine", "txn", "begin", str(engine), "--dir", str(other)])
    assert both.exit_code == 2 and "name different engines" in both.stderr and not other.exists()
    nothing = runner.invoke(app, ["engine", "recover"])
    assert nothing.exit_code == 2 and "DIR or --dir" in nothing.stderr


# -- 6: exit codes as docs/exit-codes.md says ----------------------------------------------------------------------

@pytest.mark.parametrize("args", [["engine", "txn", "begin", "--bogus"], ["engine", "txn", "begn"],
                                  ["engine", "txn", "commit", "--txn-id"]])
def test_usage_errors_under_engine_txn_exit_2(args):
    result = _txnadmin(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors_under_transactions_keep_pulsar_admins_1():
    for args in (["transactions", "list", "--bogus"], ["txn", "lst"], ["-u", "local:/nowhere", "txn", "begin"]):
        result = _txnadmin(*args)
        assert result.returncode == 1, (args, result.stderr)


def test_ctrl_c_on_engine_run_exits_130_after_its_counters(tmp_path):
    engine = tmp_path / "e"
    _init(engine)
    proc = subprocess.Popen([*TXNADMIN, "engine", "run", str(engine), "--duration", "10", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("engine run:")  # running: the Ctrl-C handler is in place
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().endswith("interrupted")
    counters = json.loads(out)
    assert counters["errors"] == 0 and counters["started"] < 2000  # cut short: 10 s at 200/s would start 2000


def test_engine_init_on_an_existing_engine_is_a_usage_error(tmp_path):
    _init(tmp_path / "e")
    again = runner.invoke(app, ["engine", "init", str(tmp_path / "e")])
    assert again.exit_code == 2 and "already exists" in again.stderr and "--exist-ok" in again.stderr
    assert runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--exist-ok"]).exit_code == 0


def test_downgrade_status_without_a_checklist_is_not_yet(tmp_path, monkeypatch):
    _init(tmp_path / "e")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["-u", f"local:{tmp_path / 'e'}", "downgrade", "status"])
    assert result.exit_code == 1, result.output
    assert "no recorded downgrade here" in result.stderr and "downgrade start" in result.stderr
    docs = (ROOT / "docs" / "exit-codes.md").read_text()
    assert "`downgrade status` with no checklist" in docs and "`engine init` on an existing engine" in docs


def test_rehearse_refuses_a_used_directory_in_one_line(tmp_path):
    earlier = tmp_path / "earlier"
    _init(earlier / "engine")
    (earlier / "txnadmin-downgrade.json").write_text("{}")
    refused = runner.invoke(app, ["rehearse", "--dir", str(earlier), "--scan-engine", "python"])
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.count("\n") == 1 and "--force" in refused.stderr and "new directory" in refused.stderr
    assert (earlier / "engine" / "metadata.db").exists()  # refused before anything was touched

    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (foreign / "engine").mkdir()
    for extra in ([], ["--force"]):  # --force replaces a rehearsal, never files it did not write
        result = runner.invoke(app, ["rehearse", "--dir", str(foreign), "--scan-engine", "python", *extra])
        assert result.exit_code == 2 and "notes.txt" in result.stderr, result.output
    assert (foreign / "notes.txt").read_text() == "mine"

    without_dir = runner.invoke(app, ["rehearse", "--force"])
    assert without_dir.exit_code == 2 and "--force goes with --dir" in without_dir.stderr


def test_rehearse_force_leaves_a_running_rehearsal_alone(tmp_path):
    from txnadmin.engine.engine import Engine

    _init(tmp_path / "engine")
    running = Engine(tmp_path / "engine", maintenance=False)  # holds the writer lock as a live rehearsal does
    try:
        result = runner.invoke(app, ["rehearse", "--dir", str(tmp_path), "--force", "--scan-engine", "python"])
    finally:
        running.close()
    assert result.exit_code == 2 and "open for writing" in result.stderr, result.output
    assert (tmp_path / "engine" / "metadata.db").exists()


@pytest.mark.slow
def test_rehearse_force_replaces_an_earlier_rehearsal(tmp_path):
    _init(tmp_path / "engine")
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "stale.log").write_text("from before")
    result = runner.invoke(app, ["rehearse", "--dir", str(tmp_path), "--force", "--warmup", "1", "--scan-engine",
                                 "python", "-o", "json"])
    assert result.exit_code in (0, 1), result.output  # a verdict, whichever: the rehearsal ran in that directory
    assert json.loads(result.stdout)["directory"] == str(tmp_path)
    assert not (tmp_path / "dump" / "stale.log").exists() and (tmp_path / "dump" / "ledgers.txt").exists()


# -- 7: wrong input is refused ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_with_open_transaction(tmp_path_factory):
    engine = tmp_path_factory.mktemp("open") / "e"
    _init(engine)
    begun = runner.invoke(app, ["engine", "txn", "begin", str(engine), "--produce", "orders=x"])
    assert begun.exit_code == 0, begun.output
    return engine, json.loads(begun.stdout)["txnId"]


def test_a_topic_the_target_does_not_have_is_not_found(engine_with_open_transaction):
    engine, txn = engine_with_open_transaction
    for command in (["list"], ["find-hanging", "--max-transaction-timeout", "0"]):
        missing = runner.invoke(app, ["-u", f"local:{engine}", "transactions", *command, "-t", "no-such-topic"])
        assert missing.exit_code == 1, missing.output
        assert missing.stdout == ""
        assert missing.stderr == ("Topic not found persistent://public/default/no-such-topic\n\n"
                                  "Reason: Topic not found persistent://public/default/no-such-topic\n")
    touched = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "list", "-t", "orders", "-o", "json"])
    assert touched.exit_code == 0 and [r["txnId"] for r in json.loads(touched.stdout)] == [txn], touched.output


@pytest.mark.parametrize("name, said", [("persistent://public", "Invalid topic name: persistent://public"),
                                        ("persistent://public/default", "Invalid topic name: "),
                                        ("persistent://public//x", "Invalid topic name: "),
                                        ("bogus://public/default/x", "Invalid topic domain: 'bogus'"),
                                        ("public/x", "Invalid short topic name 'public/x'")])
def test_topic_names_pulsar_refuses_are_refused(engine_with_open_transaction, name, said):
    engine, _ = engine_with_open_transaction
    local = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "list", "-t", name])
    assert local.exit_code == 1 and said in local.stderr and local.stdout == "", local.output
    # Over HTTP the name is refused before any request: nothing listens on port 9, and that is never reached.
    remote = runner.invoke(app, ["-u", "http://127.0.0.1:9", "transactions", "transaction-buffer-stats", "-t", name])
    assert remote.exit_code == 1 and said in remote.stderr and "Error connecting" not in remote.stderr, remote.output


def test_a_misspelt_setting_gets_a_did_you_mean(tmp_path):
    result = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--set", "transactionLogBatchedWriteEnable=true"])
    assert result.exit_code == 2 and not (tmp_path / "e").exists()
    assert "unknown setting 'transactionLogBatchedWriteEnable'; did you mean 'transactionLogBatchedWriteEnabled'?" \
        in result.stderr
    far = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--set", "zzz=1"])
    assert far.exit_code == 2 and "did you mean" not in far.stderr
    _init(tmp_path / "e")
    live = runner.invoke(app, ["engine", "set", "transactionPendingAckBatchedWriteEnable", "true", "--dir",
                               str(tmp_path / "e")])
    assert live.exit_code == 2 and "did you mean 'transactionPendingAckBatchedWriteEnabled'?" in live.stderr


# -- 8: scanning what engine dump wrote ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """A real engine dump whose entry logs still hold trimmed ledgers full of batched entries (small ledgers, rolled
    often), in a directory whose name needs quoting."""
    root = tmp_path_factory.mktemp("dumped")
    engine = root / "e"
    _init(engine, *BATCHED, "--set", "managedLedgerMaxEntriesPerLedger=20",
          "--set", "managedLedgerMinLedgerRolloverTimeMinutes=0")
    ran = runner.invoke(app, ["engine", "run", str(engine), "--duration", "1.5", "--topics", "1", "--subscriptions",
                              "1", "-o", "json"])
    assert ran.exit_code == 0, ran.output
    out = root / "my dump"
    dumped = runner.invoke(app, ["engine", "dump", str(engine), "--out", str(out)])
    assert dumped.exit_code == 0, dumped.output
    return out, json.loads(dumped.stdout), dumped.stderr


def _scan(*args: str) -> dict:
    result = runner.invoke(app, ["scan", *args, "--engine", "python", "-o", "json"])
    assert result.exit_code in (0, 1, 3), result.output
    return json.loads(result.stdout)


def _verdict(report: dict) -> tuple:
    return report["verdict"], report["liveBatchedEntries"], report["ledgers"], report["trimmedLedgers"]


def test_scan_of_a_dump_directory_judges_by_the_list_written_with_it(dump):
    out, _, _ = dump
    auto = _scan(str(out))
    named = _scan(str(out / "ledgers"), "--ledgers", str(out / "ledgers.txt"))
    blind = _scan(str(out / "ledgers"))
    assert auto["ledgerListGiven"] and _verdict(auto) == _verdict(named)
    assert auto["trimmedLedgers"] and any(t["batchedEntries"] for t in auto["trimmedLedgers"])  # it can tell
    assert blind["liveBatchedEntries"] > auto["liveBatchedEntries"]  # what was wrongly called live before
    assert f"ledger list: {out / 'ledgers.txt'} (written by `engine dump` with these entry logs; --ledgers " \
           "overrides)" in auto["notes"]
    assert not any("skipped" in n for n in auto["notes"])
    table = runner.invoke(app, ["scan", str(out), "--engine", "python"], env={"COLUMNS": "300"})
    assert "note: ledger list: " in table.stdout and "in live ledgers" in table.stdout
    unlisted = runner.invoke(app, ["scan", str(out / "ledgers"), "--engine", "python"], env={"COLUMNS": "300"})
    assert "in live ledgers" not in unlisted.stdout and "not known to be live (no ledger list)" in unlisted.stdout


def test_only_the_one_list_of_the_dump_being_scanned_is_used(dump, tmp_path):
    import shutil

    out, _, _ = dump
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    two = _scan(str(out), str(copy))
    assert not two["ledgerListGiven"] and two["verdict"] == "batched"
    assert any(n.startswith("not used: ") and "several dumps" in n for n in two["notes"])
    stray = tmp_path / "stray"
    stray.mkdir()
    shutil.copy(next((copy / "ledgers" / "current").glob("*.log")), stray / "ff.log")
    outside = _scan(str(out), str(stray))
    assert not outside["ledgerListGiven"] and any("lies outside it" in n for n in outside["notes"])
    (copy / "ledgers.txt").write_text("ledgerID: 1\n")  # a list named on the command line wins
    overridden = _scan(str(out), "--ledgers", str(out / "ledgers.txt"))
    assert overridden["ledgerListGiven"] and not any(n.startswith("not used") for n in overridden["notes"])
    nested = _scan(str(tmp_path))  # a list found deeper down belongs to some dump, not to the inputs
    assert not nested["ledgerListGiven"]


def test_overlapping_inputs_are_read_once(dump):
    out, _, _ = dump
    logs = sorted((out / "ledgers" / "current").glob("*.log"))
    once = _scan(str(out))
    again = _scan(str(out), str(out / "ledgers"), str(logs[0]), str(out / "ledgers" / "current" / ".." / "current"))
    assert [i["path"] for i in again["inputs"]] == [i["path"] for i in once["inputs"]]
    assert len(again["inputs"]) == len(logs) and _verdict(again) == _verdict(once)
    assert any(n.startswith("overlapping inputs: each file was read once") for n in again["notes"])


def test_engine_dump_prints_the_scan_command_that_reads_it(dump):
    out, summary, stderr = dump
    command = f"txnadmin scan {shlex.quote(str(out))}"
    assert summary["scanCommand"] == command and f"next: {command}\n" in stderr
    args = shlex.split(command)
    assert args[0] == "txnadmin"
    pasted = runner.invoke(app, [*args[1:], "--engine", "python", "-o", "json"])
    assert json.loads(pasted.stdout)["ledgerListGiven"] is True


@pytest.mark.spark
def test_spark_scan_of_a_dump_directory_uses_its_list_too(dump, spark):
    out, _, _ = dump
    result = runner.invoke(app, ["scan", str(out), "--engine", "spark", "-o", "json"])
    report = json.loads(result.stdout)
    assert report["ledgerListGiven"] and _verdict(report)[:2] == _verdict(_scan(str(out)))[:2]


# -- 10: quiet by default --------------------------------------------------------------------------------------------

def test_jvm_start_up_notes_are_dropped_and_everything_else_reaches_stderr(tmp_path):
    """The JVM inherits stderr when it starts: a child started inside the quiet window writes to it, as the JVM does
    (its note about incubator modules, Spark's log-level hint), and only its other lines come through."""
    from txnadmin.scan.spark import _without_jvm_noise

    script = ("import sys; sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\n"
              "Setting default log level to \"WARN\".\\nTo adjust logging level use sc.setLogLevel(newLevel).\\n"
              "ERROR something real\\n')")
    sink = tmp_path / "stderr"
    with open(sink, "wb") as fh:
        saved = os.dup(2)
        os.dup2(fh.fileno(), 2)
        try:
            child = _without_jvm_noise(lambda: subprocess.Popen([sys.executable, "-c", script]))
            child.wait(timeout=30)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    for _ in range(100):  # the forwarding thread ends when the child's copy of the pipe closes
        if sink.read_bytes():
            break
        import time

        time.sleep(0.05)
    assert sink.read_text() == "ERROR something real\n"


def test_make_run_is_quiet_unless_v():
    quiet = subprocess.run(["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True).stdout
    loud = subprocess.run(["make", "-n", "-B", "run", "V=1"], cwd=ROOT, capture_output=True, text=True).stdout
    install = [line for line in quiet.splitlines() if "-e ." in line]
    assert install and all("PYTHONWARNINGS=ignore" in line and " -q " in line for line in install)
    assert "rehearse  --discard" in quiet or "rehearse --discard" in quiet
    assert "rehearse -v --discard" in loud and not any("PYTHONWARNINGS" in line or " -q " in line
                                                   for line in loud.splitlines() if "pip install" in line)


def test_the_quick_tour_engine_directory_is_git_ignored():
    readme = (ROOT / "README.md").read_text()
    assert "txnadmin engine init ./eng " in readme
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "eng/metadata.db"], cwd=ROOT)
    assert ignored.returncode == 0


def test_ci_smoke_names_the_version_the_engine_reports():
    text = (ROOT / "examples" / "ci-smoke.sh").read_text()
    assert EngineConfig().engineBrokerVersion in text and "3.3.2" not in text
