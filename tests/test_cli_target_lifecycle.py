"""Every command opens its target through one helper and releases it when the command ends, however it ends.

A local engine left open keeps its directory lock (a second open fails with "locked"), so after each command
the engine must open again in this same process."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.engine import Engine

runner = CliRunner()


@pytest.fixture(scope="module")
def built_engine(tmp_path_factory):
    """An engine after a short workload, built once; each test runs its command on a copy of it."""
    d = tmp_path_factory.mktemp("built") / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "2"]).exit_code == 0
    assert runner.invoke(app, ["engine", "run", str(d), "--duration", "0.5", "-o", "json"]).exit_code == 0
    return d


@pytest.fixture
def engine_dir(built_engine, tmp_path):
    d = tmp_path / "e"
    shutil.copytree(built_engine, d)
    return d


def _released(directory) -> None:
    Engine(directory, maintenance=False).close()  # raises if a command still holds the lock


@pytest.mark.parametrize("args, code", [
    (["transactions", "coordinators-list"], 0),
    (["transactions", "transaction-metadata", "-m", "0", "-l", "987654"], 1),  # a 404 ends the command
    (["transactions", "set-txn-tc-batch-log", "--enable", "--reload", "--yes"], 0),  # two calls, one open
    (["downgrade", "start", "--dry-run", "--state", "{tmp}/s.json"], 0),
    (["downgrade", "status", "--state", "{tmp}/missing.json"], 1),  # fails after opening
    (["upgrade", "--dry-run"], 0),
    (["doctor", "--only", "coordinators"], None),
])
def test_each_command_releases_a_local_engine(engine_dir, tmp_path, args, code):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    env = {"TXNADMIN_HOME": str(tmp_path / "home")}
    result = runner.invoke(app, ["-u", f"local:{engine_dir}", *args], env=env)
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None))), result.output
    if code is not None:
        assert result.exit_code == code, result.output
    _released(engine_dir)


def test_an_interrupted_command_releases_the_engine(engine_dir, monkeypatch):
    from txnadmin.engine import stats

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stats, "coordinators_list", interrupted)
    result = runner.invoke(app, ["-u", f"local:{engine_dir}", "transactions", "coordinators-list"])
    assert result.exit_code == 130, result.output
    _released(engine_dir)


def test_target_treats_an_empty_url_as_the_usage_error_docs_exit_codes_says(tmp_path):
    result = runner.invoke(app, ["-u", "", "target"], env={"TXNADMIN_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "--admin-url is empty" in result.stderr
    unreadable = runner.invoke(app, ["--conf", str(tmp_path / "nope.conf"), "target"])
    assert unreadable.exit_code == 3 and "nope.conf" in unreadable.stderr
