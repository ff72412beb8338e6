"""`txnadmin rehearse --brokers N`: the rehearsal on an engine of several brokers, walked down to a release before
2.11; and `--too-early`, the negative control that downgrades a broker before safe and shows what fails."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app


def test_too_early_shows_logs_failing_on_the_downgraded_broker(tmp_path):
    result = CliRunner().invoke(app, ["rehearse", "--brokers", "2", "--too-early", "--dir", str(tmp_path),
                                      "--warmup", "2", "--scan-engine", "python", "-o", "json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    early = out["tooEarly"]
    assert out["safe"] is False and early["version"] == "2.10.6" and early["failed"] > 0
    failures = out["recoveryFailures"]
    assert len(failures) == early["failed"]
    for failure in failures:  # each names the log and the entry that stopped its replay
        assert failure["log"].endswith(("__transaction_pending_ack",)) or "__transaction_log_" in failure["log"]
        assert failure["ledgerId"] >= 0 and failure["entryId"] >= 0 and failure["version"] == "2.10.6"
    # the entry named is a batched one: read it back from the stopped engine's own ledgers
    from txnadmin.engine.engine import Engine
    from txnadmin.engine.position import Position

    engine = Engine(tmp_path / "engine", read_only=True)
    try:
        for failure in failures:
            ml = engine.factory.open(failure["log"], engine.ml_config())
            payload = ml.read_entry(Position(failure["ledgerId"], failure["entryId"]))
            assert payload[:2] == b"\x0e\x01"
    finally:
        engine.close()


def test_too_early_tells_how_it_failed_to_people(tmp_path):
    result = CliRunner().invoke(app, ["rehearse", "--brokers", "2", "--too-early", "--discard", "--warmup", "2"])
    assert result.exit_code == 1, result.output
    assert "could not recover on it" in result.stdout and "batched entry" in result.stdout
    assert "verdict: NOT SAFE (as expected" in result.stdout


@pytest.mark.parametrize("args, says", [
    (["--too-early"], "--brokers 2 or more"),
    (["--brokers", "0"], "--brokers"),
    (["--brokers", "17"], "--brokers"),
])
def test_cluster_options_are_checked_before_anything_runs(tmp_path, args, says):
    result = CliRunner().invoke(app, ["rehearse", "--dir", str(tmp_path / "r"), *args])
    assert result.exit_code == 2 and says in result.output
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
