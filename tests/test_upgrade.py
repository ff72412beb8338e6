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
    result = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}", "-o", "json"],
                           env={"TXNADMIN_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["confirmed"] and out["enabled"] and out["thresholds"] == {}
    # the version the engine's broker reports (set at init), not the minimum the message always quotes
    assert list(out["versions"].values()) == ["3.3.2"]
    assert f"{next(iter(out['versions']))} runs 3.3.2" in out["checked"]
    assert out["coodinatorArray"] == [{"0": True}, {"1": True}] and out["subscriptionArray"]
    # what the engine stored, not only what the command says it did
    from txnadmin.engine.config import read_dynamic

    stored = read_dynamic(d)
    assert stored["transactionLogBatchedWriteEnabled"] == stored["transactionPendingAckBatchedWriteEnabled"] == "true"


THRESHOLD_LINES = ["transactionLogBatchedWriteMaxRecords=100", "transactionPendingAckBatchedWriteMaxRecords=100"]


def test_thresholds_are_broker_conf_lines_in_the_plan_and_the_run_is_not_complete_until_brokers_show_them(tmp_path):
    """Issue 34 point 12: Pulsar marks only the two ...Enabled flags dynamic. The plan said `set
    transactionLogBatchedWriteMaxRecords=100`, the run warned Pulsar refused it, then ended 'enabled everywhere', 0."""
    from txnadmin.engine.config import read_dynamic

    d = _engine(tmp_path)
    env = {"TXNADMIN_HOME": str(tmp_path / "home")}
    plan = runner.invoke(app, ["upgrade", "--dry-run", "-u", f"local:{d}", "--max-records", "100"], env=env)
    assert plan.exit_code == 0, plan.output
    assert "not dynamic in Pulsar" in plan.stdout and "broker.conf" in plan.stdout and "restart" in plan.stdout
    assert all(f"broker.conf: {line}" in plan.stdout for line in THRESHOLD_LINES), plan.stdout
    assert "set transactionLogBatchedWriteMaxRecords" not in plan.stdout  # no promise of a change it cannot make
    assert read_dynamic(d) == {}  # the dry run changed nothing
    run = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}", "--max-records", "100"], env=env)
    assert run.exit_code == 1, run.output  # batching is on, but what was asked is not in effect: not complete
    assert "verdict: not complete" in run.stdout and "enabled everywhere" not in run.stdout
    assert "transactionLogBatchedWriteMaxRecords is 512" in run.stdout
    assert all(f"  {line}" in run.stdout.splitlines() for line in THRESHOLD_LINES)
    again = next(line for line in run.stdout.splitlines() if line.startswith("then run"))
    assert f"txnadmin -u local:{d} upgrade --max-records 100" in again
    stored = read_dynamic(d)
    assert "transactionLogBatchedWriteMaxRecords" not in stored and stored["transactionLogBatchedWriteEnabled"] == "true"
    as_json = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}", "--max-records", "100", "-o", "json"], env=env)
    out = json.loads(as_json.stdout)
    assert as_json.exit_code == 1 and not out["confirmed"] and out["thresholds"]["brokerConf"] == THRESHOLD_LINES
    assert list(out["thresholds"]["notInEffect"].values())[0]["transactionLogBatchedWriteMaxRecords"] == "512"
    # the operator adds the lines to the broker's configuration and restarts it: now the upgrade is complete
    settings = [arg for line in THRESHOLD_LINES for arg in ("--set", line)]
    assert runner.invoke(app, ["engine", "init", str(d), "--exist-ok", *settings]).exit_code == 0
    done = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}", "--max-records", "100"], env=env)
    assert done.exit_code == 0 and "verdict: enabled everywhere" in done.stdout, done.output


def test_old_brokers_stop_the_upgrade(tmp_path):
    d = _engine(tmp_path, "2.10.4")
    result = runner.invoke(app, ["upgrade", "-u", f"local:{d}"], env={"TXNADMIN_HOME": str(tmp_path / "home")})
    assert result.exit_code == 1 and "runs 2.10.4" in result.stderr


def test_every_broker_is_asked_and_an_unreachable_one_must_be_vouched_for(tmp_path):
    import pytest

    from txnadmin.admin.local import LocalAdmin
    from txnadmin.admin.protocol import TargetUnreachableError
    from txnadmin.procedures.upgrade import UpgradeError, check_versions

    from engine_helpers import open_engine

    class ThreeBrokers(LocalAdmin):
        versions = {"b1:8080": "3.3.2", "b2:8080": "2.10.4", "b3:8080": None}

        def active_brokers(self, cluster):
            return sorted(self.versions)

        def broker_version(self, broker):
            if self.versions[broker] is None:
                raise TargetUnreachableError(f"http://{broker}: cannot connect (Connection refused)")
            return self.versions[broker]

    with open_engine(tmp_path / "e") as engine:
        admin = ThreeBrokers(engine)
        with pytest.raises(UpgradeError, match="b3:8080.*--assume-version-ok") as err:
            check_versions(admin, "2.11.0")
        assert err.value.exit_code == 3
        with pytest.raises(UpgradeError, match="b2:8080 runs 2.10.4") as err:
            check_versions(admin, "2.11.0", ["b3:8080"])
        assert err.value.exit_code == 1
        admin.versions["b2:8080"] = "3.0.0"
        versions, checked = check_versions(admin, "2.11.0", ["b3:8080"])
        assert set(versions) == {"b1:8080", "b2:8080", "b3:8080"} and "b1:8080 runs 3.3.2" in checked


def test_upgrade_failures_are_its_own_error_not_the_downgrades(tmp_path, monkeypatch):
    import pytest

    from txnadmin.admin.local import LocalAdmin
    from txnadmin.procedures.downgrade import DowngradeError
    from txnadmin.procedures.upgrade import UpgradeError, check_versions

    from engine_helpers import open_engine

    assert not issubclass(UpgradeError, DowngradeError) and not issubclass(DowngradeError, UpgradeError)

    class NoBrokers(LocalAdmin):
        def active_brokers(self, cluster):
            return []

    with open_engine(tmp_path / "e") as engine:
        with pytest.raises(UpgradeError, match="brokers whose versions must be checked") as err:
            check_versions(NoBrokers(engine), "2.11.0")
        assert err.value.exit_code == 3
    # through the CLI: one line naming the versions check, exit 3, nothing changed
    d = _engine(tmp_path / "cli")
    monkeypatch.setattr(LocalAdmin, "active_brokers", NoBrokers.active_brokers)
    result = runner.invoke(app, ["upgrade", "--yes", "-u", f"local:{d}"], env={"TXNADMIN_HOME": str(tmp_path / "home")})
    assert result.exit_code == 3, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "versions must be checked" in result.stderr
    from txnadmin.engine.config import read_dynamic

    assert "transactionLogBatchedWriteEnabled" not in read_dynamic(d)  # refused before any flag was set


def test_bad_flags_are_usage_errors_before_any_call(tmp_path):
    """Refused before the target is touched: a garbage --min-version used to end in 'unexpected ValueError', and a
    negative threshold went into the plan."""
    d = tmp_path / "never-created"
    for args, says in ((["--min-version", "garbage"], "--min-version 'garbage'"),
                       (["--max-records", "-1"], "--max-records -1"), (["--max-size", "0"], "--max-size 0"),
                       (["--max-delay-ms", "-5"], "--max-delay-ms -5"),
                       # below Pulsar's startup minimums: the broker.conf lines would stop the broker from starting
                       (["--max-records", "9"], "--max-records 9: must be at least 10"),
                       (["--max-size", "131071"], "--max-size 131071: must be at least 131072")):
        result = runner.invoke(app, ["-u", f"local:{d}", "upgrade", "--dry-run", *args])
        assert result.exit_code == 2 and result.stderr.startswith(f"error: {says}"), (args, result.output)
        assert "unexpected" not in result.stderr
