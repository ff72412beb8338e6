"""Engine configuration: one ConfigError, one validator run before anything is saved, errors that name the key.

The headline case comes from issue #18: `engine init --set transactionLogBatchedWriteMaxRecords=5` with batching on
saved the bad configuration, then failed while opening the writers (a second ConfigError class the CLI did not catch),
so running `init` again said an engine already existed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine import config
from txnadmin.engine.config import ConfigError, EngineConfig

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def test_init_with_a_threshold_below_pulsars_minimum_is_one_line_exit_2_and_saves_nothing(tmp_path):
    directory = tmp_path / "e"
    done = subprocess.run(TXNADMIN + ["engine", "init", str(directory), "--set", "transactionLogBatchedWriteEnabled=true",
                                      "--set", "transactionLogBatchedWriteMaxRecords=5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "transactionLogBatchedWriteMaxRecords" in lines[0] and "10" in lines[0], lines[0]
    assert not directory.exists()  # nothing saved: not the config, not a half-made engine
    # and the operator's next try with a good value simply works
    again = runner.invoke(app, ["engine", "init", str(directory), "-c", "1", "--set",
                                "transactionLogBatchedWriteEnabled=true", "--set",
                                "transactionLogBatchedWriteMaxRecords=10"])
    assert again.exit_code == 0, again.output


def test_a_pending_ack_threshold_error_names_the_pending_ack_key(tmp_path):
    result = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--set",
                                 "transactionPendingAckBatchedWriteEnabled=true", "--set",
                                 "transactionPendingAckBatchedWriteMaxSize=1000"])
    assert result.exit_code == 2, result.output
    assert "transactionPendingAckBatchedWriteMaxSize" in result.stderr
    assert "transactionLogBatchedWrite" not in result.stderr
    assert not (tmp_path / "e").exists()


def test_thresholds_are_checked_only_while_their_batching_is_on(tmp_path):
    # Pulsar's TransactionBatchedWriteValidator ignores the thresholds of a disabled writer
    result = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "-c", "1", "--set",
                                 "transactionLogBatchedWriteMaxRecords=5", "--set",
                                 "transactionPendingAckBatchedWriteEnabled=true"])
    assert result.exit_code == 0, result.output


def test_exist_ok_with_a_bad_value_leaves_the_saved_config_untouched(tmp_path):
    directory = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(directory), "-c", "1"]).exit_code == 0
    before = (directory / config.CONF_FILE).read_bytes()
    result = runner.invoke(app, ["engine", "init", str(directory), "--exist-ok", "--set",
                                 "transactionPendingAckBatchedWriteEnabled=true", "--set",
                                 "transactionPendingAckBatchedWriteMaxDelayInMillis=0"])
    assert result.exit_code == 2, result.output
    assert "transactionPendingAckBatchedWriteMaxDelayInMillis" in result.stderr
    assert (directory / config.CONF_FILE).read_bytes() == before


def test_there_is_one_config_error_class():
    import ast
    from pathlib import Path

    package = Path(config.__file__).resolve().parent.parent
    defined = [str(path.relative_to(package)) for path in package.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ClassDef) and node.name == "ConfigError"]
    assert defined == ["engine/config.py"]


@pytest.mark.parametrize("component, key", [("tc", "transactionLogBatchedWriteMaxRecords"),
                                            ("pending-ack", "transactionPendingAckBatchedWriteMaxRecords")])
def test_the_startup_check_names_each_log_s_key_and_the_writers_refuse_nothing(component, key):
    """The minimum is the broker's startup check (per key); TxnLogBufferedWriter itself batches with 3 records."""
    from txnadmin.engine.engine import writer_config

    bad = EngineConfig()
    prefix = "transactionLogBatchedWrite" if component == "tc" else "transactionPendingAckBatchedWrite"
    bad.set(prefix + "Enabled", "true")
    bad.set(prefix + "MaxRecords", "3")
    with pytest.raises(ConfigError, match=f"'{key}' value must be greater than or equal to 10"):
        bad.validate()
    assert writer_config(bad, component).batching


def test_validate_names_each_bad_key():
    good = EngineConfig(transactionLogBatchedWriteEnabled=True, transactionPendingAckBatchedWriteEnabled=True)
    good.validate()
    bad = EngineConfig(transactionPendingAckBatchedWriteEnabled=True, transactionPendingAckBatchedWriteMaxSize=10)
    with pytest.raises(ConfigError, match="'transactionPendingAckBatchedWriteMaxSize' value must be greater than or "
                                          "equal to 131072"):
        bad.validate()


def test_save_never_writes_a_configuration_the_engine_cannot_open(tmp_path):
    EngineConfig().save(tmp_path)
    before = (tmp_path / config.CONF_FILE).read_bytes()
    bad = EngineConfig(transactionLogBatchedWriteEnabled=True, transactionLogBatchedWriteMaxDelayInMillis=0)
    with pytest.raises(ConfigError, match="transactionLogBatchedWriteMaxDelayInMillis"):
        bad.save(tmp_path)
    assert (tmp_path / config.CONF_FILE).read_bytes() == before


@pytest.mark.parametrize("args", [["-c", "0"], ["-c", "-3"], ["--set", "transactionCoordinatorCount=0"]])
def test_an_engine_needs_at_least_one_coordinator(tmp_path, args):
    # Pulsar's initialize-transaction-coordinator-metadata refuses fewer than one; so does init, before writing
    result = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), *args])
    assert result.exit_code == 2, result.output
    assert "coordinators" in result.output or "transactionCoordinatorCount" in result.stderr
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("flag, value", [("--duration", "-1"), ("--duration", "nan"), ("--rate", "-5"),
                                         ("--rate", "inf"), ("--concurrency", "0")])
def test_engine_run_refuses_nonsense_numbers_before_it_starts(tmp_path, flag, value):
    """A negative or NaN --duration used to run until killed (it is not > 0); refused, nothing run."""
    runner = CliRunner()
    assert runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "-c", "1"]).exit_code == 0
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "e"), flag, value])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {flag} "), result.output
    assert not (tmp_path / "e" / "server.json").exists()


@pytest.mark.parametrize("value, says", [("0", "managedLedgerStatsPeriodSeconds' value must be greater than or equal "
                                                "to 1"), ("-5", "greater than or equal to 1"),
                                         ("soon", "'soon' is not a valid int")])
def test_the_metrics_period_is_at_least_a_second_as_in_pulsar(tmp_path, value, says):
    """A buffered /metrics renders once per managedLedgerStatsPeriodSeconds: Pulsar refuses less than 1 s."""
    result = CliRunner().invoke(app, ["engine", "init", str(tmp_path / "e"), "--set", "metricsBufferResponse=true",
                                      "--set", f"managedLedgerStatsPeriodSeconds={value}"])
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "e").exists()
