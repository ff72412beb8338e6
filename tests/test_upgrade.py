"""`txnadmin upgrade` on the engine: versions checked, batching enabled and confirmed per store."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()


def _engine(tmp_path, version="3.3.2"):
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "2", "--set", f"engineBrokerVersion={version}"]).exit_code == 0
    assert runner.invoke(app, ["engine", "run", str(d), "--duration", "0.5", "-o", "json"]).exit_code == 0
    return d


def test_upgrade_enables_and_confirms(tmp_path):
    d = _engine(tmp_path)
    result = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}", "--max-records", "100", "-o", "json"],
                           env={"TXNADMIN_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["confirmed"] and out["enabled"] and "2.11.0" in out["checked"]
    assert out["coodinatorArray"] == [{"0": True}, {"1": True}] and out["subscriptionArray"]
    assert out["thresholds"]["transactionLogBatchedWriteMaxRecords"] == "100"
    assert any("bufferedwriter" in w for w in out["watch"])


def test_old_brokers_stop_the_upgrade(tmp_path):
    d = _engine(tmp_path, "2.10.4")
    result = runner.invoke(app, ["upgrade", "-u", f"local:{d}"], env={"TXNADMIN_HOME": str(tmp_path / "home")})
    assert result.exit_code == 1 and "runs 2.10.4" in result.stderr
