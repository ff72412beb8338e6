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
    assert out["confirmed"] and out["enabled"]
    # the version the engine's broker reports (set at init), not the minimum the message always quotes
    assert list(out["versions"].values()) == ["3.3.2"]
    assert f"{next(iter(out['versions']))} runs 3.3.2" in out["checked"]
    assert out["coodinatorArray"] == [{"0": True}, {"1": True}] and out["subscriptionArray"]
    # what the engine stored, not only what the command says it did
    from txnadmin.engine.config import read_dynamic

    stored = read_dynamic(d)
    key = "transactionLogBatchedWriteMaxRecords"
    # not dynamic in Pulsar (only the two switches are): refused, and the upgrade says where to set it instead
    assert key not in stored and key not in out["thresholds"]
    assert any(w.startswith(f"{key}: Can't update non-dynamic configuration") and "broker.conf" in w
               for w in out["warnings"]), out["warnings"]
    assert stored["transactionLogBatchedWriteEnabled"] == stored["transactionPendingAckBatchedWriteEnabled"] == "true"


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
                       (["--max-delay-ms", "-5"], "--max-delay-ms -5")):
        result = runner.invoke(app, ["-u", f"local:{d}", "upgrade", "--dry-run", *args])
        assert result.exit_code == 2 and result.stderr.startswith(f"error: {says}"), (args, result.output)
        assert "unexpected" not in result.stderr
